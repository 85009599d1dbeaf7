"""Training as a cloud job (SageMaker, a per-run EC2 cluster): the launcher, with no Airflow in it.

:class:`RemoteLauncher` owns what a remote training run is besides the job itself: it opens the
MLflow run and builds the :class:`~airflow_provider_dltrain.engines.train_spec.TrainJobSpec`, turns
the finished job's report into the same :class:`~airflow_provider_dltrain.training.runner.TrainResult`
as the in-process backends (finishing the MLflow run), names the rank that failed, and ends the run
FAILED when the job fails or is stopped.

Two callers use it, both with a :class:`~airflow_provider_dltrain.training.request.TrainingRequest`:
:func:`run_remote` (what ``run_training(backend="sagemaker" | "ec2")`` calls, from a notebook or a
plain script: submit or re-attach, wait, tear down) and ``TrainModelOperator`` (the same around
Airflow's retries, deferral and ``on_kill``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.training.request import TrainingRequest, is_remote_backend

if TYPE_CHECKING:
    from airflow_provider_dltrain.engines import Engine, JobHandle, JobStatus, RunIdentity
    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.tracked_run import TrainResult

log = logging.getLogger(__name__)

StorageFor = Callable[[str], "Mapping[str, str] | None"]


def train_fn_name(train_fn: Any) -> str:
    """``"package.module:function"`` for a remote job, which imports the function by name."""
    if isinstance(train_fn, str):
        return train_fn
    from airflow_provider_dltrain.training.pickling import _importable

    module, name = getattr(train_fn, "__module__", ""), getattr(train_fn, "__qualname__", "")
    if not module or "<" in name or not _importable(module):
        raise InvalidSpecError(
            f"a remote backend imports the training function by name: pass train_fn as "
            f"'package.module:function' (got {train_fn!r:.100}, which a job cannot import)"
        )
    return f"{module}:{name}"


class RemoteLauncher:
    """Opens, finishes and fails the MLflow run of a training job on ``engine``.

    :param engine: a training engine adapter (``get_engine("sagemaker" | "ec2", clients, options)``).
    :param tracking: where the MLflow run lives; its credentials go to the job's environment.
    :param storage_for: ``uri -> storage options`` for the run directory (the ranks' error reports).
    """

    def __init__(
        self,
        engine: Engine,
        tracking: TrackingConfig,
        *,
        storage_for: StorageFor | None = None,
    ) -> None:
        from airflow_provider_dltrain.engines.training_engine import as_training_engine

        self.engine = as_training_engine(engine)
        self.tracking = tracking
        self.storage_for = storage_for or (lambda uri: None)
        self.spec: TrainJobSpec | None = None
        self.engine.set_job_credentials(tracking.env)

    def job_spec(self, identity: RunIdentity, request: TrainingRequest) -> TrainJobSpec:
        """Open the MLflow run of ``request`` (every tag and param, as in-process training) and the job's spec.

        The run lives in this launcher's ``tracking``; the job imports ``request.train_fn`` by name.
        """
        from dataclasses import replace

        from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
        from airflow_provider_dltrain.store.config import strip_userinfo
        from airflow_provider_dltrain.training.tracked_run import start_tracked_run
        from airflow_provider_dltrain.training.tracking import end_failed

        engine = self.engine
        name = train_fn_name(request.train_fn)
        storage = request.storage_options
        started = start_tracked_run(
            replace(
                request,
                train_fn=name,
                tracking=self.tracking,
                storage_options=dict(storage) if storage else None,
            ),
            backend_name=engine.name,
            world_size=engine.world_size,
        )
        try:
            plan = started.plan
            self.spec = TrainJobSpec(
                train_fn=name,
                dataset=plan.ref.to_dict(),
                data_filter=[[list(p) for p in conj] for conj in plan.data_filter],
                hparams=started.params,
                seed=started.seed,
                world_size=engine.world_size,
                data_fingerprint=plan.fingerprint,
                identity=identity,
                tags={k: v for k, v in started.tags.items() if k.startswith("dltrain.")},
                tracking_uri=strip_userinfo(self.tracking.tracking_uri),
                registry_uri=strip_userinfo(self.tracking.registry_uri),
                mlflow_run_id=started.run_id,
                experiment_id=started.experiment_id,
                non_finite=request.non_finite,
                wandb=_job_wandb(request, started, self.tracking),
            )
        except BaseException as err:
            end_failed(self.tracking, started.run_id, err)
            raise
        return self.spec

    def attached(self, handle: JobHandle) -> TrainJobSpec:
        """The spec of a job found running (a retry re-attaching reads it back from the job)."""
        self.spec = self.engine.job_spec(handle)
        return self.spec

    def outcome(self, handle: JobHandle, status: JobStatus) -> TrainResult:
        """The TrainResult of a Completed job (the MLflow run finished); a failed one raises with its reason."""
        from airflow_provider_dltrain.engines.base import SUCCEEDED
        from airflow_provider_dltrain.training.finite import check_report
        from airflow_provider_dltrain.training.tracked_run import TrainResult, finish_tracked_run

        spec = self.attached(handle)
        report = self.engine.result(handle) if status.state == SUCCEEDED else {}
        if status.state != SUCCEEDED or "error" in report:
            raise self.failure(handle, status, spec)
        check_report(report, spec.non_finite)  # raising here: the callers end the run FAILED
        if spec.mlflow_run_id:
            finish_tracked_run(self.tracking, spec.mlflow_run_id, report, non_finite=spec.non_finite)
        from airflow_provider_dltrain.lake.ref import DeltaRef

        tags = spec.tags
        return TrainResult(
            run_id=spec.mlflow_run_id or "",
            model_uri=report.get("model_uri"),
            metrics=dict(report["metrics"]),
            dataset=DeltaRef.coerce(spec.dataset),
            params=spec.hparams,
            experiment_id=spec.experiment_id,
            data_fingerprint=spec.data_fingerprint,
            code_hash=tags.get("dltrain.code_hash", ""),
            params_hash=tags.get("dltrain.params_hash", ""),
            world_size=spec.world_size,
            weights_sha256=report.get("weights_sha256"),
            run_dir=spec.run_dir,
        )

    def failure(self, handle: JobHandle, status: JobStatus, spec: TrainJobSpec) -> Exception:
        """The error naming the job, the service's reason and the rank that failed first."""
        from airflow_provider_dltrain.exceptions import TrainingFailedError
        from airflow_provider_dltrain.training.errors import TrainingUserError, rank_errors

        engine = self.engine
        what = "was stopped" if status.state == "CANCELLED" else f"ended {status.raw}"
        head = f"{engine.name} job {handle.ids.get('job_name', handle.ids)} {what}: {status.message or 'no reason given'}"
        storage = self.storage_for(spec.run_dir)
        errors = rank_errors(spec.run_dir, dict(storage) if storage else None)
        if not errors:
            return TrainingFailedError(f"{head}. No rank reported an error (a crash or a launcher problem).")
        first = errors[0]
        cls = TrainingUserError if first.get("user_error") else TrainingFailedError
        return cls(
            f"{head}\ntraining failed on rank {first['rank']} of {spec.world_size}: {first['type']}: "
            f"{first['message']}\n--- traceback of rank {first['rank']} ---\n{first['traceback']}"
        )

    def end_failed(self, err: BaseException) -> None:
        """End the MLflow run FAILED (when one was opened) with ``err`` as the reason."""
        from airflow_provider_dltrain.training.tracking import end_failed

        if self.spec is not None and self.spec.mlflow_run_id:
            end_failed(self.tracking, self.spec.mlflow_run_id, err)

    def killed(self, handle: JobHandle) -> None:
        """The job was stopped from outside (a killed task): end its MLflow run FAILED."""
        from airflow_provider_dltrain.training.tracking import KILLED

        if self.spec is None:
            try:
                self.attached(handle)
            except Exception as err:  # the spec is gone: nothing names the run any more
                log.warning(
                    "%s job %s: no spec to end its MLflow run by: %s", self.engine.name, handle.ids, err
                )
                return
        self.end_failed(RuntimeError(KILLED))


def _job_wandb(request: TrainingRequest, started: Any, tracking: TrackingConfig) -> dict[str, Any] | None:
    """The job's W&B spec (rank 0 of the job records the run), as its JSON; ``None``: MLflow only."""
    from airflow_provider_dltrain.store.config import strip_userinfo
    from airflow_provider_dltrain.training.wandb_tracking import run_spec

    spec = run_spec(
        request.extra_tracking,
        started.tags,
        run_id=started.run_id,
        experiment_id=started.experiment_id,
        tracking_uri=strip_userinfo(tracking.tracking_uri),
    )
    return spec.to_dict() if spec else None


def boto3_clients(region: str | None = None) -> Callable[[str], Any]:
    """``service -> boto3 client`` from boto3's own chain (environment, profile, instance role;
    ``AWS_ENDPOINT_URL`` included), one client per service, made when first asked for (a Ray job
    staged on a shared directory needs none, nor boto3)."""
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            import boto3

            if "session" not in made:
                made["session"] = boto3.session.Session(region_name=region)
            made[service] = made["session"].client(service)
        return made[service]

    return client


def adhoc_identity(run_key: str, train_fn: Any) -> RunIdentity:
    """The identity of a training run started outside Airflow: ``run_key`` is what a second call
    re-attaches by (the job of an earlier call with the same key, if it is still running)."""
    from airflow_provider_dltrain.engines import RunIdentity

    key = str(run_key).strip()
    if not key:
        raise InvalidSpecError("run_key must name the run (a second call with the same key re-attaches)")
    task = train_fn_name(train_fn).rsplit(":", 1)[-1]
    # unique per submission (job names are), stable per key (what find() looks for)
    return RunIdentity(dag_id="run_training", run_id=key, task_id=task, try_number=int(time.time()) % 10**9)


def remote_run_key(request: TrainingRequest) -> str:
    """``request.run_key``, else a hash of the function, the data, its filter, ``hparams`` and the backend."""
    import hashlib

    from airflow_provider_dltrain.utils.hashing import canonical_json

    if request.run_key is not None:
        return request.run_key
    # canonical whatever form it came in (a DeltaRef, its dict, its JSON text with any spacing: the
    # request parsed it): the same table version is the same run
    ref = canonical_json(request.ref.to_dict())
    key_of = [
        train_fn_name(request.train_fn),
        ref,
        canonical_json(request.data_filter or []),
        canonical_json(dict(request.hparams or {})),
        request.backend,
    ]
    return hashlib.sha256(canonical_json(key_of).encode()).hexdigest()[:16]


def run_remote(request: TrainingRequest) -> TrainResult:
    """Train ``request`` as a job on its backend and wait for it: what ``run_training`` does for a
    cloud backend.

    Submits the job, or re-attaches to the one an earlier call with the same run key
    (:func:`remote_run_key`) left running; waits (progress in the log); tears down what the job
    created (an EC2 cluster) whatever happens; an interrupted wait (Ctrl-C) stops the job and ends
    its MLflow run FAILED.
    """
    from airflow_provider_dltrain.engines import options_dict
    from airflow_provider_dltrain.engines.lifecycle import finish, start_job, wait_or_cancel
    from airflow_provider_dltrain.engines.training_engine import get_training_engine
    from airflow_provider_dltrain.store.config import TrackingConfig

    name = train_fn_name(request.train_fn)
    run_key = remote_run_key(request)
    options = options_dict(request.backend_options)
    clients = request.aws_clients or boto3_clients(options.get("region"))
    engine = get_training_engine(str(request.backend), clients, options)
    # tracking=False was refused when the request was built: the job logs into an MLflow run
    launcher = RemoteLauncher(
        engine, request.tracking or TrackingConfig(), storage_for=lambda uri: request.storage_options
    )
    identity = adhoc_identity(run_key, name)

    try:
        handle, reattached = start_job(
            engine,
            identity,
            lambda: launcher.job_spec(identity, request),
            earlier=f"an earlier call with run key {run_key!r}",
            logger=log,
        )

        def terminal() -> JobStatus:
            spec = launcher.attached(handle) if reattached else launcher.spec
            log.info(
                "MLflow run %s (the job logs metrics and the model into it)", spec and spec.mlflow_run_id
            )
            if handle.console_url:
                log.info("console: %s", handle.console_url)
            return wait_or_cancel(engine, handle, poll_interval=request.poll_interval, logger=log)

        # an EC2 cluster is torn down whatever happens from here on
        return finish(engine, handle, lambda status: launcher.outcome(handle, status), status_of=terminal)
    except BaseException as err:
        launcher.end_failed(err)
        raise


__all__ = [
    "RemoteLauncher",
    "adhoc_identity",
    "boto3_clients",
    "is_remote_backend",
    "remote_run_key",
    "run_remote",
    "train_fn_name",
]
