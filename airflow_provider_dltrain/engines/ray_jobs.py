"""Ray training: one Ray job per try, submitted through Ray's Jobs API to an existing cluster.

The job's entry point is ``job_script.py --spec <uri>`` (the script every engine runs), started by
the cluster's job supervisor on the head node; with ``DLTRAIN_ENGINE=ray`` in its environment it
hands the :class:`~airflow_provider_dltrain.engines.train_spec.TrainJobSpec` to
``jobs.ray_driver``, which runs the same oblivious ``train(ctx)`` on ``num_workers`` Ray Train
workers under ``TorchTrainer`` (its process group, one rank per worker). The code travels as the
job's ``working_dir`` (the provider and the training function's package, the code bundle every
engine ships): Ray uploads it once per content to the cluster and puts it first on every worker's
path, so the cluster runs the launcher's code. Python, Ray, torch, deltalake and MLflow come from the
cluster's environment and must match the launcher's Python and Ray versions (Ray's own rule).

Submission ids are ``RunIdentity.job_name`` (``dltrain-<task>-<task key>-t<try>``): a retry looks
for a running job of the same task (``find``) and re-attaches; submitting an id twice attaches too.
The job's metadata carries the task's identity tags and where its result is written.

What Ray already does is used as it is: the Jobs API (submit, status, stop, logs), the upload of the
working directory, Ray Train's worker group and process group. Nothing here starts or stops a cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import shlex
import shutil
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobFailedError,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.engines.staging import Stager, job_script
from airflow_provider_dltrain.engines.train_spec import job_tracking_env
from airflow_provider_dltrain.engines.training_engine import TrainingEngine
from airflow_provider_dltrain.exceptions import InvalidSpecError, require

log = logging.getLogger(__name__)

STATES = {
    "PENDING": PENDING,
    "RUNNING": RUNNING,
    "SUCCEEDED": SUCCEEDED,
    "FAILED": FAILED,
    "STOPPED": CANCELLED,
}
ENGINE_ENV = "DLTRAIN_ENGINE"
OPTIONS_ENV = "DLTRAIN_RAY_TRAIN"  # JSON: the driver's ScalingConfig / RunConfig settings
RESULT_KEY = "dltrain.result_uri"  # job metadata: where the job writes its result (find reads it)
PLACEMENT = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def ray_auth_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``Authorization`` header of Ray's token authentication when ``RAY_AUTH_MODE=token``.

    Ray's client reads the mode once, when ``ray`` is first imported: a process that set the
    variables later (a notebook, a test) would call the cluster without its token. So the token is
    read here, where Ray reads it (``RAY_AUTH_TOKEN``, the file of ``RAY_AUTH_TOKEN_PATH``, else
    ``~/.ray/auth_token``), when the client is made; {} without token authentication.
    """
    env = os.environ if environ is None else environ
    if env.get("RAY_AUTH_MODE", "").lower() != "token":
        return {}
    token = env.get("RAY_AUTH_TOKEN", "").strip()
    path = env.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if not token:
        try:
            with open(path) as file:
                token = file.read().strip()
        except OSError as err:
            raise InvalidSpecError(
                f"RAY_AUTH_MODE=token but the token cannot be read from {path} ({err.strerror}): set "
                "RAY_AUTH_TOKEN_PATH to the cluster's token file (or RAY_AUTH_TOKEN) where the task runs"
            ) from err
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class RayOptions(Options):
    """``backend_options`` of ``backend="ray"`` (:class:`RayEngine`).

    :param address: the cluster's dashboard (Jobs API) address, e.g. ``"http://head:8265"``.
    :param staging_uri: where the spec, results and rank reports go: an ``s3://`` prefix the cluster
        can read and write, or a directory the launcher and every node mount.
    :param num_workers: Ray Train workers, one rank each (the world size).
    :param use_gpu: one GPU per worker (NCCL); otherwise Gloo on CPU.
    :param resources_per_worker: Ray resources of each worker (default ``{"CPU": 1}``).
    :param placement_strategy: ``PACK`` (default), ``SPREAD``, ``STRICT_PACK`` or ``STRICT_SPREAD``.
    :param storage_path: Ray Train's run storage (default: Ray's, ``~/ray_results`` on the head).
    :param runtime_env: more of the job's runtime environment (``pip``, ``env_vars``...); ``working_dir``
        is the code bundle and cannot be set.
    :param dashboard_url: the dashboard's address for people (the task's link), default ``address``.
    :param tracking_secret: a Secrets Manager secret with the MLflow credentials (the job reads it);
        without one, the ``mlflow`` connection's credentials go into the job's environment, which
        anyone who can see the job in the dashboard can read.
    :param environment: more (non-secret) environment variables for the job.
    :param region: of ``tracking_secret`` and an ``s3://`` staging prefix.
    """

    address: str
    staging_uri: str
    num_workers: int = 2
    use_gpu: bool = False
    resources_per_worker: Mapping[str, float] = dataclasses.field(default_factory=dict)
    placement_strategy: str = "PACK"
    storage_path: str | None = None
    runtime_env: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    dashboard_url: str | None = None
    tracking_secret: str | None = None
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    region: str | None = None

    def check(self) -> None:
        if not str(self.address or "").startswith(("http://", "https://")):
            raise InvalidSpecError(
                f"backend option address must be the Ray dashboard's URL (the Jobs API), e.g. "
                f"'http://ray-head:8265', got {self.address!r}"
            )
        if int(self.num_workers) < 1:
            raise InvalidSpecError(f"backend option num_workers must be >= 1, got {self.num_workers!r}")
        if self.placement_strategy not in PLACEMENT:
            raise InvalidSpecError(
                f"placement_strategy must be one of {PLACEMENT}, got {self.placement_strategy!r}"
            )
        extra = dict(self.runtime_env or {})
        if "working_dir" in extra or "py_modules" in extra:
            raise InvalidSpecError(
                "runtime_env may not set working_dir or py_modules: the job's code is the staged bundle "
                "(the training function's package ships with it)"
            )
        address = str(self.address).rstrip("/")
        self._set(
            address=address,
            num_workers=int(self.num_workers),
            use_gpu=bool(self.use_gpu),
            resources_per_worker={str(k): float(v) for k, v in dict(self.resources_per_worker or {}).items()},
            runtime_env=extra,
            dashboard_url=(self.dashboard_url or address).rstrip("/"),
            environment={str(k): str(v) for k, v in dict(self.environment or {}).items()},
        )


class RayEngine(TrainingEngine):
    """Run ``train(ctx)`` as a Ray job on ``num_workers`` Ray Train workers of an existing cluster
    (options: :class:`RayOptions`).

    Checkpoints go to the try's run directory under ``staging_uri`` (``ctx.save_checkpoint``).
    """

    name = "ray"

    def __init__(self, clients: Any, options: RayOptions | Mapping[str, Any]) -> None:
        self.options = RayOptions.of(options)
        staging = str(self.options.staging_uri or "")
        self.stager = Stager(staging, clients("s3") if staging.startswith(("s3://", "s3a://")) else None)
        self._credentials: dict[str, str] = {}
        self._client: Any = None

    @property
    def world_size(self) -> int:
        return self.options.num_workers

    def set_job_credentials(self, credentials: Mapping[str, str]) -> None:
        """MLflow credentials for the job's environment (used only when no ``tracking_secret``)."""
        self._credentials = dict(credentials)

    @property
    def client(self) -> Any:
        """The Jobs API client, made on first use (making one asks the cluster for its version)."""
        if self._client is None:
            require("ray.job_submission", "ray")
            from ray.job_submission import JobSubmissionClient

            try:
                self._client = JobSubmissionClient(self.options.address, headers=ray_auth_headers())
            except (ConnectionError, RuntimeError) as err:
                raise JobFailedError(f"cannot use the Ray Jobs API at {self.options.address}: {err}") from err
        return self._client

    # tenacity's sleep, which a test replaces to see the waits without waiting them
    _sleep: Any = staticmethod(time.sleep)

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        """A Jobs API call, tried again on a dropped connection (Ray's client retries nothing).

        Three tries over about 7 s (waits of 2 s and 5 s); then :class:`JobFailedError`, which Airflow
        retries as a new try that re-attaches to the job (``find``). Errors the cluster answers with
        are raised at once.
        """
        import requests
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_exception_type,
            stop_after_attempt,
            wait_incrementing,
        )

        def warn(state: Any) -> None:
            err = state.outcome.exception()
            log.warning(
                "the Ray Jobs API at %s did not answer %s (%s): trying again", self.options.address, what, err
            )

        retrying = Retrying(
            retry=retry_if_exception_type((requests.ConnectionError, requests.Timeout)),
            stop=stop_after_attempt(3),
            wait=wait_incrementing(start=2.0, increment=3.0),
            before_sleep=warn,
            sleep=self._sleep,
        )
        try:
            return retrying(call, *args)
        except RetryError as err:
            last = err.last_attempt.exception()
            raise JobFailedError(
                f"the Ray Jobs API at {self.options.address} did not answer {what}: {last}"
            ) from last

    # -- request -----------------------------------------------------------------------------------
    def driver_options(self) -> dict[str, Any]:
        """What ``jobs.ray_driver`` builds ``TorchTrainer`` from (the job's ``DLTRAIN_RAY_TRAIN``)."""
        return {
            "use_gpu": self.options.use_gpu,
            "resources_per_worker": self.options.resources_per_worker or None,
            "placement_strategy": self.options.placement_strategy,
            "storage_path": self.options.storage_path,
        }

    def request(self, staged: StagedRun, working_dir: str) -> dict[str, Any]:
        """The ``submit_job`` arguments for ``staged`` (exactly what is sent)."""
        identity = staged.spec.identity
        env_vars = {
            **dict(self.options.runtime_env.get("env_vars") or {}),
            **self.options.environment,
            **job_tracking_env(self._credentials, self.options.tracking_secret),
            ENGINE_ENV: self.name,
            OPTIONS_ENV: json.dumps(self.driver_options(), sort_keys=True),
        }
        return {
            "entrypoint": f"python job_script.py --spec {shlex.quote(staged.spec_uri)}",  # run by a shell
            "submission_id": identity.job_name,
            "runtime_env": {**self.options.runtime_env, "working_dir": working_dir, "env_vars": env_vars},
            "metadata": {**identity.tags(), RESULT_KEY: staged.result_uri},
            "entrypoint_num_cpus": 0,  # the driver only waits on the workers
        }

    def _working_dir(self, staged: StagedRun) -> str:
        """A directory holding the job script and the unpacked code bundle (the job's ``working_dir``)."""
        bundle = self.stager.get(staged.code_uri)
        if bundle is None:
            raise JobFailedError(f"the code bundle {staged.code_uri} is gone")
        directory = tempfile.mkdtemp(prefix="dltrain-ray-")
        with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
            zf.extractall(directory)
        with open(os.path.join(directory, "job_script.py"), "wb") as handle:
            handle.write(job_script())
        return directory

    # -- engine protocol ---------------------------------------------------------------------------
    def submit(self, staged: StagedRun) -> JobHandle:
        directory = self._working_dir(staged)
        request = self.request(staged, directory)
        sid = request["submission_id"]
        try:
            # Ray's client logs the whole request (the job's env_vars) at DEBUG: never in the task log
            with _quiet("ray.dashboard.modules.dashboard_sdk"):
                self._call("a submission", lambda: self.client.submit_job(**request))  # uploads the code once
        except RuntimeError as err:
            self._attach_existing(sid, staged, err)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return self._handle(sid, staged.result_uri)

    def _attach_existing(self, sid: str, staged: StagedRun, err: RuntimeError) -> None:
        """A refused submission: attach only to this task's job of the same id, still running."""
        try:
            info = self.client.get_job_info(sid)
        except RuntimeError:
            raise JobFailedError(f"Ray did not accept job {sid}: {err}") from err
        raw = _raw_status(info)
        ours = (info.metadata or {}).get("dltrain:task_key") == staged.spec.identity.task_key
        if not ours or STATES.get(raw, PENDING) not in (PENDING, RUNNING):
            raise JobFailedError(
                f"a Ray job named {sid} exists already ({raw}"
                f"{'' if ours else ', submitted by another task'}): this try cannot run under its name; "
                "clear the task again (a new try gets a new name)"
            ) from err
        log.info("Ray job %s exists already and is %s: attaching to it", sid, raw)

    def _handle(self, sid: str, result_uri: str) -> JobHandle:
        return JobHandle(
            self.name, {"job_name": sid}, result_uri, f"{self.options.dashboard_url}/#/jobs/{sid}"
        )

    def find(self, identity: RunIdentity) -> JobHandle | None:
        prefix = identity.job_name.rsplit("-t", 1)[0] + "-t"
        running = sorted(
            (job.start_time or 0, job.submission_id, (job.metadata or {}).get(RESULT_KEY, ""))
            for job in self._call("a listing", self.client.list_jobs)
            if (job.submission_id or "").startswith(prefix) and str(job.status) in ("PENDING", "RUNNING")
        )
        if not running:
            return None
        _, sid, result_uri = running[-1]
        return self._handle(sid, result_uri)

    def poll(self, handle: JobHandle) -> JobStatus:
        info = self._call("a status request", self.client.get_job_info, handle.ids["job_name"])
        raw = _raw_status(info)
        message = str(info.message or "")
        if len(message) > 2000:
            message = "..." + message[-2000:]
        return JobStatus(STATES.get(raw, PENDING), raw, message)

    def cancel(self, handle: JobHandle) -> None:
        """Stop the job (the driver is signalled; its Train workers end with it); a finished or
        unknown job is left as it is."""
        sid = handle.ids["job_name"]
        try:
            if not self.poll(handle).terminal:
                self._call("a stop request", self.client.stop_job, sid)
        except RuntimeError as err:  # the Jobs API answers 404 for a job it does not know
            if "does not exist" not in str(err) and "not found" not in str(err).lower():
                raise
            log.info("Ray job %s is not known to the cluster: nothing to stop", sid)

    def teardown(self, handle: JobHandle) -> None:
        """Nothing to remove: the cluster is not the run's, and a finished job holds no workers."""

    def log_location(self, handle: JobHandle) -> str:
        sid = handle.ids["job_name"]
        return f"{self.options.dashboard_url}/#/jobs/{sid} (or: ray job logs {sid} --address {self.options.address})"


def _raw_status(info: Any) -> str:
    """Ray's status word of a job (``JobStatus`` is a str enum; its value, not its repr)."""
    return str(getattr(info.status, "value", info.status))


@contextlib.contextmanager
def _quiet(name: str) -> Any:
    """``name``'s logger at INFO or above while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(max(level, logging.INFO))
    try:
        yield
    finally:
        logger.setLevel(level)
