"""The engine protocol: stage a run, submit it, poll it, cancel it, tear down what it created.

An engine adapter moves a :class:`~airflow_provider_dltrain.engines.run_spec.RunSpec` and the code to
where a job runs and reports the job's state; it never runs stage code itself (the job's entry
point does). Adapters get ready-made boto3 clients, so they import no Airflow: the Airflow layer
builds the clients from its connections (``hooks/engines.py``).

Terminal states are defined once here, so the operator, the trigger and the reaper cannot disagree
whether ``STOPPED`` is a failure.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from airflow_provider_dltrain.engines.run_spec import JobSpec, RunIdentity
from airflow_provider_dltrain.exceptions import DltrainError, DltrainUserError

log = logging.getLogger(__name__)

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})


class JobFailedError(DltrainError):
    """The job ran and failed (or was cancelled); the message carries the service's reason."""


class JobUserError(JobFailedError, DltrainUserError):
    """The job refused its input (bad spec, schema, data): retrying cannot help."""


@dataclass(frozen=True)
class JobStatus:
    """A job's state in our words (``state``) and the service's (``raw``), with its reason."""

    state: str
    raw: str = ""
    message: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True)
class JobHandle:
    """What identifies one submitted job; JSON so it travels through trigger kwargs and XCom.

    ``ids`` holds the service's identifiers (``job_name``/``job_run_id``, ``cluster_id``/``step_id``,
    ``application_id``/``job_run_id``, ``pid``); ``result_uri`` is where the job writes its result.
    """

    engine: str
    ids: dict[str, Any]
    result_uri: str
    console_url: str | None = None
    created: dict[str, Any] = field(default_factory=dict)  # resources to tear down (a transient cluster)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobHandle:
        return cls(**dict(data))


@dataclass(frozen=True)
class StagedRun:
    """Where staging put the spec, the entry script and the code bundle."""

    spec: JobSpec
    spec_uri: str
    script_uri: str
    code_uri: str
    result_uri: str


@runtime_checkable
class Engine(Protocol):
    """A place jobs run. Every method but ``submit`` is idempotent."""

    name: str

    def stage(self, spec: Any) -> StagedRun:
        """Put the spec (a ``RunSpec``, or a ``TrainJobSpec`` for a training engine) and the code where the job reads them."""
        ...

    def find(self, identity: RunIdentity) -> JobHandle | None:
        """A job for this task instance that is still running (a retry re-attaches to it)."""
        ...

    def submit(self, staged: StagedRun) -> JobHandle: ...

    def poll(self, handle: JobHandle) -> JobStatus: ...

    def cancel(self, handle: JobHandle) -> None: ...

    def teardown(self, handle: JobHandle) -> None:
        """Remove what the run created (a transient cluster); safe to call more than once."""
        ...

    def result(self, handle: JobHandle) -> dict[str, Any]:
        """The job's result JSON; raises :class:`JobFailedError` when the job wrote none."""
        ...

    # Optional: ``log_location(handle) -> str``, where the job's logs are (CloudWatch group and
    # stream, an S3 prefix, a file); read through :func:`log_location`, which never raises.


def wait(
    engine: Engine,
    handle: JobHandle,
    *,
    poll_interval: float = 10.0,
    timeout: float | None = None,
    on_status: Callable[[JobStatus], None] | None = None,
) -> JobStatus:
    """Poll until the job is terminal (or ``timeout`` seconds passed: then raise ``TimeoutError``)."""
    started = time.monotonic()
    last = ""
    while True:
        status = engine.poll(handle)
        if status.raw != last and on_status is not None:
            on_status(status)
        last = status.raw
        if status.terminal:
            return status
        if timeout is not None and time.monotonic() - started > timeout:
            raise TimeoutError(f"{engine.name} job {handle.ids} still {status.raw} after {timeout:.0f}s")
        time.sleep(poll_interval)


def outcome(engine: Engine, handle: JobHandle, status: JobStatus) -> dict[str, Any]:
    """The job's result for a terminal ``status``; a failure raises with the job's own reason.

    A job that refused its input writes ``{"error": ..., "user_error": true}`` to its result: that
    becomes :class:`JobUserError` so Airflow does not retry it.
    """
    if status.state == SUCCEEDED:
        return engine.result(handle)
    try:
        written = engine.result(handle)
    except JobFailedError:
        written = {}
    reason = written.get("error") or status.message or "no reason given by the service"
    what = "was cancelled" if status.state == CANCELLED else f"failed ({status.raw})"
    error = JobUserError if written.get("user_error") else JobFailedError
    logs = log_location(engine, handle)
    raise error(
        f"{engine.name} job {describe_ids(handle)} {what}: {reason}. Nothing was committed by it."
        + (f" Logs: {logs}" if logs else "")
    )


def log_location(engine: Engine, handle: JobHandle) -> str | None:
    """Where the job's logs are, in words, if the adapter knows; never raises (a log line must not fail a task)."""
    locate = getattr(engine, "log_location", None)
    if locate is None:
        return None
    try:
        return str(locate(handle))
    except Exception as err:  # the service may not answer; the job's outcome is what matters
        log.debug("no log location for %s job %s: %s", engine.name, handle.ids, err)
        return None


def job_summary(engine: Engine, handle: JobHandle, result: Mapping[str, Any]) -> str:
    """A few lines for the task log: the job, the table version, the rows, the model, the logs.

    Only keys of the result that are there are shown (an ETL or scoring result has them all); no
    secret is ever part of a result.
    """
    lines = [f"{engine.name} job {describe_ids(handle)} succeeded"]
    if result.get("uri") is not None and result.get("version") is not None:
        state = (
            "committed"
            if result.get("committed", True)
            else "unchanged (the partition already held this content: nothing committed)"
        )
        lines.append(f"  table {result['uri']} version {result['version']}: {state}")
    if "rows_written" in result:
        rows = _rows_line(result)
        reasons = sorted((result.get("quarantine_reasons") or {}).items(), key=lambda kv: -kv[1])
        if reasons:
            shown = "; ".join(f"{n} x {r[:80]}" for r, n in reasons[:3])
            rows += f" ({shown}{'; ...' if len(reasons) > 3 else ''})"
        quarantine = result.get("quarantine") or {}
        if quarantine.get("uri") is not None and result.get("rows_quarantined"):
            rows += f" in {quarantine['uri']} version {quarantine.get('version')}"
        lines.append(rows)
    if result.get("model_name"):
        lines.append(f"  model {result['model_name']} version {result.get('model_version')}")
    logs = log_location(engine, handle)
    if logs:
        lines.append(f"  logs: {logs}")
    return "\n".join(lines)


def _rows_line(result: Mapping[str, Any]) -> str:
    """``rows: 400 written, 0 quarantined``; a run that committed nothing says so instead of "written"."""
    good, bad = result.get("rows_written"), result.get("rows_quarantined") or 0
    if result.get("committed", True):
        return f"  rows: {good} written, {bad} quarantined"
    held = "an unknown number of" if good is None else str(good)
    return f"  rows: nothing written; the partition holds {held} row(s), its quarantine {bad}"


def describe_ids(handle: JobHandle) -> str:
    """``key=value`` for each of the job's ids, for messages."""
    return " ".join(f"{k}={v}" for k, v in handle.ids.items())


def parse_result(raw: bytes, where: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise JobFailedError(f"result {where} is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise JobFailedError(f"result {where} is not a JSON object")
    return data
