"""Where a stage runs: one protocol, one adapter per service (the job's own side is ``jobs/``). No Airflow.

``get_engine(name, clients, **options)`` builds an adapter; ``clients(service)`` returns a boto3
client (the Airflow layer makes them from an ``aws`` connection, a notebook from a boto3 session).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.engines.base import (
    TERMINAL,
    Engine,
    JobFailedError,
    JobHandle,
    JobStatus,
    JobUserError,
    StagedRun,
    outcome,
    wait,
)
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.exceptions import InvalidSpecError

LOCAL = "local"


def _factories() -> dict[str, Callable[..., Engine]]:
    from airflow_provider_dltrain.engines.emr import EmrEngine
    from airflow_provider_dltrain.engines.emr_serverless import EmrServerlessEngine
    from airflow_provider_dltrain.engines.glue import GlueEngine
    from airflow_provider_dltrain.engines.spark_submit import SparkSubmitEngine

    return {
        GlueEngine.name: GlueEngine,
        EmrEngine.name: EmrEngine,
        EmrServerlessEngine.name: EmrServerlessEngine,
        SparkSubmitEngine.name: SparkSubmitEngine,
        **_training_factories(),
    }


def _training_factories() -> dict[str, Callable[..., Engine]]:
    """Engines that run training jobs (a ``TrainJobSpec``): ``TrainModelOperator(backend=name)``."""
    from airflow_provider_dltrain.engines.ec2 import Ec2Engine
    from airflow_provider_dltrain.engines.ray_jobs import RayEngine
    from airflow_provider_dltrain.engines.sagemaker import SageMakerEngine

    return {SageMakerEngine.name: SageMakerEngine, Ec2Engine.name: Ec2Engine, RayEngine.name: RayEngine}


ENGINE_NAMES = (LOCAL, "glue", "emr", "emr_serverless", "spark_submit")
# ``TrainModelOperator(backend=...)`` names that run the training function as a job elsewhere.
TRAINING_ENGINE_NAMES = ("sagemaker", "ec2", "ray")


def check_engine_name(name: str) -> None:
    """Refuse an unknown engine name, listing the known ones (templated names are checked at run time)."""
    if "{{" in str(name):
        return
    if name not in ENGINE_NAMES:
        raise InvalidSpecError(f"engine={name!r} is not available; choose one of {ENGINE_NAMES}")


def get_engine(name: str, clients: Callable[[str], Any], options: Mapping[str, Any] | None = None) -> Engine:
    """The adapter ``name`` configured with ``options``; bad options name the engine and the problem."""
    if name not in TRAINING_ENGINE_NAMES:
        check_engine_name(name)
    factory = _factories().get(name)
    if factory is None:
        raise InvalidSpecError(f"engine={name!r} runs in-process and has no adapter")
    try:
        return factory(clients, **dict(options or {}))
    except TypeError as err:
        raise InvalidSpecError(
            f"engine_options {sorted(options or {})} do not fit engine {name!r}: {err}"
        ) from err


__all__ = [
    "ENGINE_NAMES",
    "LOCAL",
    "TRAINING_ENGINE_NAMES",
    "TERMINAL",
    "Engine",
    "JobFailedError",
    "JobHandle",
    "JobStatus",
    "JobUserError",
    "RunIdentity",
    "RunSpec",
    "StagedRun",
    "check_engine_name",
    "get_engine",
    "outcome",
    "wait",
]
