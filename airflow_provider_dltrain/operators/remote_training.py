"""The remote half of ``TrainModelOperator``: train as a cloud job (SageMaker, EC2), wait or defer.

Airflow's part only: :class:`~.engine_run.EngineRun` re-attaches a retry, defers through
``EngineJobTrigger`` and cancels on kill; everything about the training run itself (its MLflow run,
the job's spec, the TrainResult, the failing rank) is the launcher's,
:class:`~airflow_provider_dltrain.training.remote.RemoteLauncher`, which ``run_training`` uses
outside Airflow too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.operators.engine_run import EngineRun, identity_from
from airflow_provider_dltrain.training.remote import is_remote_backend, train_fn_name

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines import Engine, JobHandle, JobStatus
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.remote import RemoteLauncher
    from airflow_provider_dltrain.training.request import TrainingRequest

__all__ = ["MLFLOW_RUN_URL_KEY", "RemoteTraining", "is_remote_backend", "train_fn_name"]

# XCom key of the MLflow run page ("MLflow run" button of TrainModelOperator)
MLFLOW_RUN_URL_KEY = "mlflow_run_url"


class RemoteTraining(EngineRun):
    """Mixed into ``TrainModelOperator``: its task's :class:`TrainingRequest` as a cloud job."""

    backend: Any
    backend_options: Any
    mlflow_conn_id: str
    _launcher: RemoteLauncher | None = None

    def where(self) -> tuple[str, Any]:
        """Training runs where ``backend=`` says, with ``backend_options``."""
        return str(self.backend), self.backend_options

    def _remote_launcher(self, engine: Engine, tracking: TrackingConfig | None = None) -> RemoteLauncher:
        from airflow_provider_dltrain.operators.task_context import storage_options_for
        from airflow_provider_dltrain.training.remote import RemoteLauncher

        if tracking is None:
            from airflow_provider_dltrain.hooks.mlflow import MlflowHook

            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
        self._launcher = RemoteLauncher(
            engine, tracking, storage_for=lambda uri: storage_options_for(self.aws_conn_id, uri)
        )
        return self._launcher

    def train_remotely(self, context: Context, request: TrainingRequest) -> dict[str, Any]:
        """Submit (or re-attach to) this task's training job; wait, or defer when ``deferrable``.

        The job's MLflow run lives in ``request.tracking`` (the ``mlflow_conn_id`` connection's store).
        """
        from airflow_provider_dltrain.airflow_compat import TaskDeferred

        engine = self._engine()
        launcher = self._remote_launcher(engine, request.tracking or None)
        identity = identity_from(context)
        try:
            return self.run_on_engine(context, engine, identity, lambda: launcher.job_spec(identity, request))
        except TaskDeferred:
            raise
        except BaseException as err:
            launcher.end_failed(err)
            raise

    def job_started(self, context: Context, engine: Engine, handle: JobHandle) -> None:
        from airflow_provider_dltrain.store.config import mlflow_run_url

        launcher = self._launcher or self._remote_launcher(engine)
        spec = launcher.spec or launcher.attached(handle)
        self.log.info("MLflow run %s (the job logs metrics and the model into it)", spec.mlflow_run_id)
        url = mlflow_run_url(spec.tracking_uri or "", spec.experiment_id, spec.mlflow_run_id or "")
        context["ti"].xcom_push(key=MLFLOW_RUN_URL_KEY, value=url)

    def trigger_extras(self) -> dict[str, Any]:
        """The MLflow connection, so that killing the deferred task ends the job's run (the
        launcher finds the run in the job's spec)."""
        return {"mlflow_conn_id": self.mlflow_conn_id}

    def engine_outcome(self, engine: Engine, handle: JobHandle, status: JobStatus) -> dict[str, Any]:
        """The TrainResult of a Completed job; a failed one raises with its reason, run ends FAILED."""
        launcher = self._launcher or self._remote_launcher(engine)
        result = launcher.outcome(handle, status)
        self.log.info("MLflow run %s, model %s, metrics %s", result.run_id, result.model_uri, result.metrics)
        return result.to_dict()

    def _end_failed(self, err: BaseException) -> None:
        if self._launcher is not None:
            self._launcher.end_failed(err)

    def complete_remote(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """``execute_complete`` after the trigger fired."""
        self._remote_launcher(self._engine())
        try:
            return self.resume_from_trigger(context, event)
        except BaseException as err:
            self._end_failed(err)
            raise

    def kill_remote_job(self) -> None:
        """``on_kill``: stop the job, end the MLflow run FAILED (unless the task was cleared: the job
        and its run go on, and the next try re-attaches to them)."""
        stopped = True
        try:
            stopped = self.kill_job()
        finally:
            if stopped:
                from airflow_provider_dltrain.training.tracking import KILLED

                self._end_failed(RuntimeError(KILLED))
