"""EMR Serverless on the fake AWS: job runs execute ``jobDriver.sparkSubmit.entryPoint`` locally.

moto 5.2.5 creates applications STARTED and job runs SUCCESS, and its cancel only flips the state.
Here new objects are born CREATED / SUBMITTED (the module globals moto reads at creation), the executor
moves a run to RUNNING and then SUCCESS or FAILED (+stateDetails), and a cancel kills the process.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign"

from __future__ import annotations

import time
from typing import Any

from moto.core.utils import utcnow
from moto.emrserverless import models as es_models

from airflow_provider_dltrain.testing.local_executor import LocalCloudExecutor, iter_backends, venv_archive

TERMINAL = {"SUCCESS", "FAILED", "CANCELLED"}


def run_key(account: str, region: str, application_id: str, run_id: str) -> tuple[str, ...]:
    return ("emr_serverless", account, region, application_id, run_id)


def log_prefix(run: Any) -> str | None:
    """Where real EMR Serverless puts driver logs when the run names an S3 log location."""
    overrides = run.configuration_overrides or {}
    s3_config = (overrides.get("monitoringConfiguration") or {}).get("s3MonitoringConfiguration") or {}
    uri = s3_config.get("logUri")
    if not uri or not uri.startswith("s3://"):
        return None
    return f"{uri.rstrip('/')}/applications/{run.application_id}/jobs/{run.id}/SPARK_DRIVER/"


def finish(run: Any, state: str, details: str | None = None) -> None:
    run.state = state
    run.state_details = details
    run.updated_at = utcnow()
    started = getattr(run, "started_monotonic", None)
    if started is not None:
        run.total_execution_duration_seconds = int(time.monotonic() - started)


def scan(ex: LocalCloudExecutor) -> None:
    for account, region, backend in iter_backends(es_models.emrserverless_backends):
        for application_id, runs in list(backend.job_runs.items()):
            for run in list(runs):
                key = run_key(account, region, application_id, run.id)
                with ex.lock:
                    if not ex.claim(key) or run.state != "SUBMITTED":
                        continue
                    try:
                        _start(ex, key, run, region)
                    except Exception as exc:
                        finish(run, "FAILED", f"fake_aws could not start the job run: {exc}")


def _start(ex: LocalCloudExecutor, key: tuple[str, ...], run: Any, region: str) -> None:
    driver = (run.job_driver or {}).get("sparkSubmit") or {}
    entry_point = driver.get("entryPoint")
    if not entry_point:
        raise ValueError("jobDriver.sparkSubmit.entryPoint is missing")
    args = [str(a) for a in driver.get("entryPointArguments") or []]

    def on_exit(returncode: int, message: str) -> None:
        finish(run, "SUCCESS" if returncode == 0 else "FAILED", message or None)

    archive = venv_archive([str(driver.get("sparkSubmitParameters") or "")])
    ex.launch(
        key,
        "emr_serverless",
        entry_point,
        args,
        on_exit,
        region=region,
        log_prefix=log_prefix(run),
        archive_uri=archive,
    )
    # Real runs pass PENDING and SCHEDULED; callers only wait for "not SUBMITTED/PENDING/SCHEDULED".
    run.state = "RUNNING"
    run.updated_at = utcnow()
    run.started_monotonic = time.monotonic()


def install(ex: LocalCloudExecutor) -> None:
    # Read by moto at object creation: applications look freshly created (what the Airflow
    # create-application waiter expects) and runs wait for the executor instead of being SUCCESS.
    es_models.APPLICATION_STATUS = "CREATED"
    es_models.JOB_STATUS = "SUBMITTED"

    original_cancel = es_models.EMRServerlessBackend.cancel_job_run

    def cancel_job_run(self: Any, application_id: str, job_run_id: str) -> tuple[str, str]:
        with ex.lock:
            run = self.get_job_run(application_id, job_run_id)  # ResourceNotFoundException if unknown
            if run.state in TERMINAL:  # moto would turn a finished SUCCESS into CANCELLED
                return application_id, job_run_id
            ex.kill(run_key(self.account_id, self.region_name, application_id, job_run_id))
            result = original_cancel(self, application_id, job_run_id)
            finish(run, "CANCELLED", "Job run cancelled by user")
            return result

    es_models.EMRServerlessBackend.cancel_job_run = cancel_job_run
    ex.scanners.append(scan)
