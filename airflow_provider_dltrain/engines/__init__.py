"""Where a stage runs: one protocol, one adapter per service (the job's own side is ``jobs/``). No Airflow.

``get_engine(name, clients, **options)`` builds an adapter; ``clients(service)`` returns a boto3
client (the Airflow layer makes them from an ``aws`` connection, a notebook from a boto3 session).
"""

from __future__ import annotations

import dataclasses
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
    from airflow_provider_dltrain.engines.sagemaker_processing import SageMakerProcessingEngine
    from airflow_provider_dltrain.engines.spark_submit import SparkSubmitEngine

    return {
        GlueEngine.name: GlueEngine,
        SageMakerProcessingEngine.name: SageMakerProcessingEngine,
        EmrEngine.name: EmrEngine,
        EmrServerlessEngine.name: EmrServerlessEngine,
        SparkSubmitEngine.name: SparkSubmitEngine,
        **_training_factories(),
    }


def _training_factories() -> dict[str, Callable[..., Engine]]:
    """Engines that run training jobs (a ``TrainJobSpec``): ``TrainModelOperator(backend=name)``."""
    from airflow_provider_dltrain.engines.ec2 import Ec2Engine
    from airflow_provider_dltrain.engines.kubeflow import KubeflowEngine
    from airflow_provider_dltrain.engines.ray_jobs import RayEngine
    from airflow_provider_dltrain.engines.sagemaker import SageMakerEngine

    return {
        SageMakerEngine.name: SageMakerEngine,
        Ec2Engine.name: Ec2Engine,
        RayEngine.name: RayEngine,
        KubeflowEngine.name: KubeflowEngine,
    }


# ``ec2`` runs a stage on one instance (Spark local[*]) with the EC2 engine training uses.
ENGINE_NAMES = (LOCAL, "glue", "emr", "emr_serverless", "spark_submit", "sagemaker_processing", "ec2")
# ``TrainModelOperator(backend=...)`` names that run the training function as a job elsewhere.
TRAINING_ENGINE_NAMES = ("sagemaker", "ec2", "ray", "kubeflow")


def check_engine_name(name: str) -> None:
    """Refuse an unknown engine name, listing the known ones (templated names are checked at run time)."""
    if "{{" in str(name):
        return
    if name not in ENGINE_NAMES:
        raise InvalidSpecError(f"engine={name!r} is not available; choose one of {ENGINE_NAMES}")


def options_class(name: str) -> type | None:
    """The frozen dataclass of engine ``name``'s options (``GlueOptions``...); ``None`` for ``local``."""
    from airflow_provider_dltrain.engines.ec2 import Ec2Options
    from airflow_provider_dltrain.engines.emr import EmrOptions
    from airflow_provider_dltrain.engines.emr_serverless import EmrServerlessOptions
    from airflow_provider_dltrain.engines.glue import GlueOptions
    from airflow_provider_dltrain.engines.kubeflow import KubeflowOptions
    from airflow_provider_dltrain.engines.ray_jobs import RayOptions
    from airflow_provider_dltrain.engines.sagemaker import SageMakerOptions
    from airflow_provider_dltrain.engines.sagemaker_processing import SageMakerProcessingOptions
    from airflow_provider_dltrain.engines.spark_submit import SparkSubmitOptions

    classes: dict[str, type] = {
        "glue": GlueOptions,
        "emr": EmrOptions,
        "emr_serverless": EmrServerlessOptions,
        "spark_submit": SparkSubmitOptions,
        "sagemaker": SageMakerOptions,
        "sagemaker_processing": SageMakerProcessingOptions,
        "ec2": Ec2Options,
        "ray": RayOptions,
        "kubeflow": KubeflowOptions,
    }
    return classes.get(name)


def options_dict(options: Any) -> dict[str, Any]:
    """``options`` as keyword arguments: a mapping as it is, an options dataclass field by field."""
    if options is None:
        return {}
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    return dict(options)


def check_engine_options(name: Any, options: Any, *, what: str = "engine") -> None:
    """Refuse an option engine ``name`` does not take, naming it and listing the valid ones.

    Checked where the DAG is defined; a templated name or options (a Jinja string) are checked when
    the engine is built. An options dataclass of another engine is refused the same way.
    """
    if not isinstance(name, str) or "{{" in name or isinstance(options, str) or not options:
        return
    cls = options_class(name)
    if cls is None:
        return
    valid = sorted(f.name for f in dataclasses.fields(cls))
    given = options_dict(options) if not isinstance(options, Mapping) else options
    for key in sorted(given, key=str):
        if key not in valid:
            raise InvalidSpecError(
                f"unknown {what} option {key!r} for {what} {name!r}; valid: {', '.join(valid)}"
            )


def get_engine(name: str, clients: Callable[[str], Any], options: Any = None) -> Engine:
    """The adapter ``name`` configured with ``options`` (a dict, or the engine's options dataclass);
    bad options name the engine and the problem."""
    if name not in TRAINING_ENGINE_NAMES:
        check_engine_name(name)
    factory = _factories().get(name)
    if factory is None:
        raise InvalidSpecError(f"engine={name!r} runs in-process and has no adapter")
    options = options_dict(options)
    try:
        return factory(clients, **options)
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
    "check_engine_options",
    "get_engine",
    "options_class",
    "options_dict",
    "outcome",
    "wait",
]
