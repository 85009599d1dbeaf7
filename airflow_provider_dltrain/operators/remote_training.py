"""The remote half of ``TrainModelOperator``: train as a cloud job (SageMaker, EC2), wait or defer.

Built on :class:`~.engine_run.EngineRun` (re-attach, defer through ``EngineJobTrigger``, cancel on
kill): the launcher opens the MLflow run and stages a
:class:`~airflow_provider_dltrain.engines.train_spec.TrainJobSpec` only when no job of this task
instance is running; the job logs metrics and the model into that run; completion finishes the
run (or ends it FAILED with the job's reason) and returns the same TrainResult as the local backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from airflow_provider_dltrain.operators.engine_run import EngineRun, identity_from

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines import Engine, JobHandle, JobStatus, RunIdentity
    from airflow_provider_dltrain.engines.train_spec import TrainingEngine, TrainJobSpec
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.registry.config import TrackingConfig


def is_remote_backend(backend: Any) -> bool:
    from airflow_provider_dltrain.engines import TRAINING_ENGINE_NAMES

    return isinstance(backend, str) and backend in TRAINING_ENGINE_NAMES


def train_fn_name(train_fn: Any) -> str:
    """``"package.module:function"`` for a remote job, which imports the function by name."""
    if isinstance(train_fn, str):
        return train_fn
    from airflow_provider_dltrain.exceptions import InvalidSpecError
    from airflow_provider_dltrain.training.pickling import _importable

    module, name = getattr(train_fn, "__module__", ""), getattr(train_fn, "__qualname__", "")
    if not module or "<" in name or not _importable(module):
        raise InvalidSpecError(
            f"a remote backend imports the training function by name: pass train_fn as "
            f"'package.module:function' (got {train_fn!r:.100}, which a job cannot import)"
        )
    return f"{module}:{name}"


class RemoteTraining(EngineRun):
    """Mixed into ``TrainModelOperator``; uses its ``train_fn``, ``backend``, ``backend_options`` …"""

    train_fn: Any
    backend: Any
    backend_options: dict[str, Any]
    data_filter: Any
    data_cutoff: str | None
    experiment_name: str | None
    mlflow_conn_id: str
    code_version: str | None
    non_finite: str
    _tracking: TrackingConfig | None = None
    _train_spec: TrainJobSpec | None = None

    def train_remotely(
        self,
        context: Context,
        *,
        ref: DeltaRef,
        hparams: dict[str, Any],
        tracking: TrackingConfig,
        storage: dict[str, str] | None,
        run: dict[str, Any],
    ) -> dict[str, Any]:
        """Submit (or re-attach to) this task's training job; wait, or defer when ``deferrable``."""
        from airflow.sdk.exceptions import TaskDeferred

        self.engine, self.engine_options = str(self.backend), dict(self.backend_options)
        engine = self._engine()
        cast("TrainingEngine", engine).set_job_credentials(tracking.env)
        self._tracking, self._train_spec = tracking, None
        identity = identity_from(context)

        def make_spec() -> TrainJobSpec:
            spec = self._job_spec(
                cast("TrainingEngine", engine), identity, ref, hparams, tracking, storage, run
            )
            self._train_spec = spec
            return spec

        try:
            return self.run_on_engine(context, engine, identity, make_spec)
        except TaskDeferred:
            raise
        except BaseException as err:
            self._end_failed(err)
            raise

    def _job_spec(
        self,
        engine: TrainingEngine,
        identity: RunIdentity,
        ref: DeltaRef,
        hparams: dict[str, Any],
        tracking: TrackingConfig,
        storage: dict[str, str] | None,
        run: dict[str, Any],
    ) -> TrainJobSpec:
        from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
        from airflow_provider_dltrain.registry.config import strip_userinfo
        from airflow_provider_dltrain.training.runner import start_tracked_run
        from airflow_provider_dltrain.training.tracking import end_failed

        name = train_fn_name(self.train_fn)
        started = start_tracked_run(
            name,
            ref,
            hparams,
            backend_name=engine.name,
            world_size=engine.world_size,
            data_filter=self.data_filter,
            tracking=tracking,
            storage_options=storage,
            code_version=self.code_version or None,
            cutoff=self.data_cutoff or None,
            **run,
        )
        try:
            plan = started.plan
            return TrainJobSpec(
                train_fn=name,
                dataset=plan.ref.to_dict(),
                data_filter=[[list(p) for p in conj] for conj in plan.data_filter],
                hparams=started.params,
                seed=started.seed,
                world_size=engine.world_size,
                data_fingerprint=plan.fingerprint,
                identity=identity,
                tags={k: v for k, v in started.tags.items() if k.startswith("dltrain.")},
                tracking_uri=strip_userinfo(tracking.tracking_uri),
                registry_uri=strip_userinfo(tracking.registry_uri),
                mlflow_run_id=started.run_id,
                experiment_id=started.experiment_id,
                non_finite=self.non_finite,
            )
        except BaseException as err:
            end_failed(tracking, started.run_id, err)
            raise

    def job_started(self, context: Context, engine: Engine, handle: JobHandle) -> None:
        from airflow_provider_dltrain.operators.training import MLFLOW_RUN_URL_KEY, mlflow_run_url

        spec = self._train_spec or engine.job_spec(handle)  # type: ignore[attr-defined]
        self._train_spec = spec
        self.log.info("MLflow run %s (the job logs metrics and the model into it)", spec.mlflow_run_id)
        url = mlflow_run_url(spec.tracking_uri or "", spec.experiment_id, spec.mlflow_run_id or "")
        context["ti"].xcom_push(key=MLFLOW_RUN_URL_KEY, value=url)

    def trigger_extras(self) -> dict[str, Any]:
        """The MLflow run and connection, so that killing the deferred task ends the run."""
        spec = self._train_spec
        if spec is None or not spec.mlflow_run_id:
            return {}
        return {"mlflow_run_id": spec.mlflow_run_id, "mlflow_conn_id": self.mlflow_conn_id}

    def engine_outcome(self, engine: Engine, handle: JobHandle, status: JobStatus) -> dict[str, Any]:
        """The TrainResult of a Completed job; a failed one raises with its reason, run ends FAILED."""
        from airflow_provider_dltrain.engines.base import SUCCEEDED
        from airflow_provider_dltrain.training.finite import check_report
        from airflow_provider_dltrain.training.runner import TrainResult, finish_tracked_run

        spec = engine.job_spec(handle)  # type: ignore[attr-defined]
        self._train_spec = spec
        report = engine.result(handle) if status.state == SUCCEEDED else {}
        if status.state != SUCCEEDED or "error" in report:
            raise self._job_failure(engine, handle, status, spec)
        check_report(report, spec.non_finite)  # raising here: the callers end the run FAILED
        tracking = self._tracking_config()
        if spec.mlflow_run_id:
            finish_tracked_run(tracking, spec.mlflow_run_id, report, non_finite=spec.non_finite)
        tags = spec.tags
        result = TrainResult(
            run_id=spec.mlflow_run_id or "",
            model_uri=report.get("model_uri"),
            metrics=dict(report["metrics"]),
            dataset=_ref(spec.dataset),
            params=spec.hparams,
            experiment_id=spec.experiment_id,
            data_fingerprint=spec.data_fingerprint,
            code_hash=tags.get("dltrain.code_hash", ""),
            params_hash=tags.get("dltrain.params_hash", ""),
            world_size=spec.world_size,
            weights_sha256=report.get("weights_sha256"),
            run_dir=spec.run_dir,
        )
        self.log.info("MLflow run %s, model %s, metrics %s", result.run_id, result.model_uri, result.metrics)
        return result.to_dict()

    def _job_failure(
        self, engine: Engine, handle: JobHandle, status: JobStatus, spec: TrainJobSpec
    ) -> Exception:
        """The error naming the job, the service's reason and the rank that failed first."""
        from airflow_provider_dltrain.exceptions import TrainingFailedError
        from airflow_provider_dltrain.training.errors import TrainingUserError, rank_errors
        from airflow_provider_dltrain.utils.context import storage_options_for

        what = "was stopped" if status.state == "CANCELLED" else f"ended {status.raw}"
        head = f"{engine.name} job {handle.ids.get('job_name', handle.ids)} {what}: {status.message or 'no reason given'}"
        errors = rank_errors(spec.run_dir, storage_options_for(self.aws_conn_id, spec.run_dir))
        if not errors:
            return TrainingFailedError(f"{head}. No rank reported an error (a crash or a launcher problem).")
        first = errors[0]
        cls = TrainingUserError if first.get("user_error") else TrainingFailedError
        return cls(
            f"{head}\ntraining failed on rank {first['rank']} of {spec.world_size}: {first['type']}: "
            f"{first['message']}\n--- traceback of rank {first['rank']} ---\n{first['traceback']}"
        )

    def _tracking_config(self) -> TrackingConfig:
        if self._tracking is None:
            from airflow_provider_dltrain.hooks.mlflow import MlflowHook

            self._tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
        return self._tracking

    def _end_failed(self, err: BaseException) -> None:
        """End this task's MLflow run FAILED (when one was opened) with ``err`` as the reason."""
        from airflow_provider_dltrain.training.tracking import end_failed

        spec = self._train_spec
        if spec is not None and spec.mlflow_run_id:
            end_failed(self._tracking_config(), spec.mlflow_run_id, err)

    def complete_remote(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """``execute_complete`` after the trigger fired."""
        self.engine, self.engine_options = str(self.backend), dict(self.backend_options)
        try:
            return self.resume_from_trigger(context, event)
        except BaseException as err:
            self._end_failed(err)
            raise

    def kill_remote_job(self) -> None:
        """``on_kill``: stop the job, end the MLflow run FAILED."""
        try:
            self.kill_job()
        finally:
            from airflow_provider_dltrain.training.tracking import KILLED

            self._end_failed(RuntimeError(KILLED))


def _ref(data: dict[str, Any]) -> DeltaRef:
    from airflow_provider_dltrain.lake.ref import DeltaRef

    return DeltaRef.coerce(data)
