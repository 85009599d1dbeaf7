"""Glue on the fake AWS: job runs execute ``Command.ScriptLocation`` locally.

moto 5.2.5 walks a run STARTING -> RUNNING -> SUCCEEDED on reads, never runs the script, has no FAILED,
omits ``ErrorMessage`` and lacks ``BatchStopJobRun``. Here the state manager holds runs in STARTING, the
executor starts the script and writes RUNNING, then SUCCEEDED or FAILED (+ErrorMessage) from its exit code.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign, attr-defined"

from __future__ import annotations

import time
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.glue import models as glue_models
from moto.glue.responses import GlueResponse
from moto.moto_api import state_manager

from airflow_provider_dltrain.testing.local_executor import LocalCloudExecutor, iter_backends

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR"}
# Glue adds these to every run's argv (real Glue adds more, e.g. --TempDir); entries must tolerate them.
BOOKMARK_ARG = "--job-bookmark-option"


def run_key(account: str, region: str, job_name: str, run_id: str) -> tuple[str, ...]:
    return ("glue", account, region, job_name, run_id)


def script_args(job: Any, run: Any) -> list[str]:
    """argv after the script, as Glue builds it: merged arguments as ``--key value`` plus its own."""
    # moto already merged DefaultArguments < run Arguments < NonOverridableArguments into run.arguments.
    merged: dict[str, str] = dict(run.arguments or {})
    args: list[str] = []
    for key, value in merged.items():
        args += [key if key.startswith("--") else f"--{key}", str(value)]
    args += ["--JOB_ID", job.name, "--JOB_RUN_ID", run.job_run_id, "--JOB_NAME", job.name]
    if BOOKMARK_ARG not in merged:
        args += [BOOKMARK_ARG, "job-bookmark-disable"]
    return args


def finish(run: Any, state: str, message: str = "") -> None:
    run.status = state
    run.completed_on = run.modified_on = utcnow()
    run.execution_seconds = int(time.monotonic() - getattr(run, "started_monotonic", time.monotonic()))
    if message:
        run.error_message = message


def scan(ex: LocalCloudExecutor) -> None:
    for account, region, backend in iter_backends(glue_models.glue_backends):
        for job in list(backend.jobs.values()):
            for run in list(job.job_runs):
                key = run_key(account, region, job.name, run.job_run_id)
                with ex.lock:
                    if not ex.claim(key) or run.status != "STARTING":
                        continue  # started already, or stopped before the executor saw it
                    try:
                        _start(ex, key, job, run, region)
                    except Exception as exc:  # one bad run fails alone, visibly
                        finish(run, "FAILED", f"fake_aws could not start the run: {exc}")


def _start(ex: LocalCloudExecutor, key: tuple[str, ...], job: Any, run: Any, region: str) -> None:
    script = (job.command or {}).get("ScriptLocation")
    if not script:
        raise ValueError(f"job {job.name} has no Command.ScriptLocation")

    def on_exit(returncode: int, message: str) -> None:
        finish(run, "SUCCEEDED" if returncode == 0 else "FAILED", message)

    ex.launch(key, "glue", script, script_args(job, run), on_exit, region=region)
    run.status = "RUNNING"
    run.started_on = run.modified_on = utcnow()
    run.started_monotonic = time.monotonic()


def install(ex: LocalCloudExecutor) -> None:
    # "manual" advances one state per N reads; with N huge, reads never move a run, only the executor does.
    state_manager.set_transition("glue::job_run", {"progression": "manual", "times": 10**12})

    original_as_dict = glue_models.FakeJobRun.as_dict

    def as_dict(self: Any) -> dict[str, Any]:
        result = original_as_dict(self)
        if getattr(self, "error_message", None):
            result["ErrorMessage"] = self.error_message
        if self.status in TERMINAL:
            result["ExecutionTime"] = getattr(self, "execution_seconds", 0)
        else:  # moto stamps CompletedOn at creation; real Glue has none until the run ends
            result.pop("CompletedOn", None)
        return result

    glue_models.FakeJobRun.as_dict = as_dict

    def batch_stop_job_run(self: GlueResponse) -> ActionResult:
        name = self._get_param("JobName")
        job = self.glue_backend.get_job(name)  # EntityNotFoundException for an unknown job
        stopped, errors = [], []
        with ex.lock:
            for run_id in self._get_param("JobRunIds") or []:
                run = next((r for r in job.job_runs if r.job_run_id == run_id), None)
                if run is None or run.status in TERMINAL:
                    code = "EntityNotFoundException" if run is None else "InvalidInputException"
                    text = f"Job run {run_id} " + ("not found" if run is None else f"is {run.status}")
                    errors.append(
                        {
                            "JobName": name,
                            "JobRunId": run_id,
                            "ErrorDetail": {"ErrorCode": code, "ErrorMessage": text},
                        }
                    )
                    continue
                ex.kill(run_key(self.current_account, self.region, name, run_id))
                finish(run, "STOPPED")
                stopped.append({"JobName": name, "JobRunId": run_id})
        return ActionResult({"SuccessfulSubmissions": stopped, "Errors": errors})

    GlueResponse.batch_stop_job_run = batch_stop_job_run
    ex.scanners.append(scan)
    _add_update_job()


# UpdateJob fields → FakeJob attributes (moto 5.2.5 has no UpdateJob at all).
_UPDATABLE = {
    "Description": "description",
    "Role": "role",
    "ExecutionProperty": "execution_property",
    "Command": "command",
    "DefaultArguments": "default_arguments",
    "NonOverridableArguments": "non_overridable_arguments",
    "MaxRetries": "max_retries",
    "Timeout": "timeout",
    "MaxCapacity": "max_capacity",
    "GlueVersion": "glue_version",
    "NumberOfWorkers": "number_of_workers",
    "WorkerType": "worker_type",
}


def _add_update_job() -> None:
    def update_job(self: GlueResponse) -> ActionResult:
        name = self._get_param("JobName")
        job = self.glue_backend.get_job(name)  # EntityNotFoundException for an unknown job
        update = self._get_param("JobUpdate") or {}
        # Real Glue replaces the whole definition: fields left out of JobUpdate are reset.
        for field, attr in _UPDATABLE.items():
            setattr(job, attr, update.get(field, {} if field.endswith("Arguments") else None))
        return ActionResult({"JobName": name})

    GlueResponse.update_job = update_job
