"""The base of the engines that run a training job (SageMaker, EC2, Ray), and their typed factory.

A :class:`TrainingEngine` stages a :class:`~.train_spec.TrainJobSpec` with its checkpoint URI and reads
the job's spec back for a retry that re-attaches; its subclasses submit, find, poll, cancel and tear
down. :func:`get_training_engine` builds one by name (``run_training(backend=...)``,
``TrainModelOperator(backend=...)``), typed as what the launcher needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.engines.base import Engine, JobFailedError, JobHandle, JobStatus, StagedRun
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.engines.staging import StagedResults, Stager
from airflow_provider_dltrain.engines.train_spec import TrainJobSpec, checkpoint_key
from airflow_provider_dltrain.exceptions import InvalidSpecError


class TrainingEngine(StagedResults):
    """Staging and results shared by the training engines (subclasses: submit, find, poll, cancel)."""

    name = "training"
    stager: Stager
    options: Any = None

    @property
    def world_size(self) -> int:
        """Ranks the job will start; the launcher writes it into the spec."""
        raise NotImplementedError

    def set_job_credentials(self, credentials: Mapping[str, str]) -> None:
        """MLflow credentials (from the Airflow connection) for the job's environment."""
        raise NotImplementedError

    # the rest of the Engine protocol, which every training engine implements
    def find(self, identity: RunIdentity) -> JobHandle | None:
        raise NotImplementedError

    def submit(self, staged: StagedRun) -> JobHandle:
        raise NotImplementedError

    def poll(self, handle: JobHandle) -> JobStatus:
        raise NotImplementedError

    def cancel(self, handle: JobHandle) -> None:
        raise NotImplementedError

    def teardown(self, handle: JobHandle) -> None:
        raise NotImplementedError

    def stage(self, spec: Any) -> StagedRun:
        """Stage ``spec`` with its checkpoint URI filled in (the option, or one per task and inputs)."""
        if not isinstance(spec, TrainJobSpec):
            raise InvalidSpecError(f"{self.name} runs training jobs only, not {type(spec).__name__}")
        checkpoint = spec.checkpoint_uri or getattr(self.options, "checkpoint_uri", None)
        if not checkpoint:
            checkpoint = self.stager.uri("runs", spec.identity.task_key, "checkpoints", checkpoint_key(spec))
        return self.stager.stage(dataclasses.replace(spec, checkpoint_uri=checkpoint))

    def job_spec(self, handle: JobHandle) -> TrainJobSpec:
        """The spec a job was started with (it sits beside its result)."""
        uri = handle.result_uri.rsplit("/", 1)[0] + "/spec.json"
        raw = self.stager.get(uri)
        if raw is None:
            raise JobFailedError(f"{self.name} job {handle.ids}: its spec {uri} is gone")
        return TrainJobSpec.from_json(raw)


def as_training_engine(engine: Engine) -> TrainingEngine:
    """``engine`` typed as a training engine; :class:`InvalidSpecError` when it runs no training jobs."""
    if not isinstance(engine, TrainingEngine):
        raise InvalidSpecError(f"engine {engine.name!r} does not run training jobs")
    return engine


def get_training_engine(
    name: str, clients: Callable[[str], Any], options: Mapping[str, Any] | None = None
) -> TrainingEngine:
    """The training engine ``name`` (``"sagemaker"``, ``"ec2"``, ``"ray"``) configured with ``options``."""
    from airflow_provider_dltrain.engines.placement import TRAINING, build, names

    remote = names(TRAINING, remote=True)
    if name not in remote:
        raise InvalidSpecError(f"backend={name!r} is not a training engine; choose one of {remote}")
    return as_training_engine(build(name, clients, options))
