"""Amazon EMR Serverless: one job run per try on an existing Spark application.

The run's ``sparkSubmit`` entry point is ``job_script.py``; the Python side comes from the
application's custom image (``imageConfiguration``) or a virtualenv archive (``venv_archive_uri``).
Runs are named after the task and tagged, so a retry finds the run an earlier try left running.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.resources import Clients, Resource
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.engines.staging import StagedResults, Stager
from airflow_provider_dltrain.exceptions import InvalidSpecError

STATES = {
    "SUBMITTED": PENDING,
    "PENDING": PENDING,
    "SCHEDULED": PENDING,
    "QUEUED": PENDING,
    "RUNNING": RUNNING,
    "CANCELLING": RUNNING,
    "SUCCESS": SUCCEEDED,
    "FAILED": FAILED,
    "CANCELLED": CANCELLED,
}
ACTIVE = ["SUBMITTED", "PENDING", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING"]


@dataclass(frozen=True)
class EmrServerlessOptions(Options):
    """``engine_options`` of ``engine="emr_serverless"`` (:class:`EmrServerlessEngine`).

    :param staging_uri: ``s3://`` prefix for the spec, script, code bundle and result.
    :param application_id: the Spark application (release emr-7.x: Spark 3.5).
    :param execution_role_arn: the role the run assumes (table buckets, staging).
    :param venv_archive_uri: ``s3://…/venv.tar.gz`` when the application has no custom image.
    :param spark_submit_parameters: more ``--conf`` settings.
    :param log_uri: ``s3://`` prefix for driver and executor logs.
    :param execution_timeout_minutes: EMR Serverless cancels the run after this.
    :param region: for console links (default: the connection's).
    """

    staging_uri: str
    application_id: str
    execution_role_arn: str
    venv_archive_uri: str | None = None
    spark_submit_parameters: str = ""
    log_uri: str | None = None
    execution_timeout_minutes: int = 120
    region: str | None = None

    def check(self) -> None:
        if not self.application_id or not self.execution_role_arn:
            raise InvalidSpecError("emr_serverless needs application_id and execution_role_arn")
        self._set(execution_timeout_minutes=int(self.execution_timeout_minutes))


class EmrServerlessEngine(StagedResults):
    """Run stages as EMR Serverless job runs (options: :class:`EmrServerlessOptions`)."""

    name = "emr_serverless"

    def __init__(self, clients: Any, options: EmrServerlessOptions | Mapping[str, Any]) -> None:
        self.options = EmrServerlessOptions.of(options)
        self.es = clients("emr-serverless")
        self.stager = Stager(self.options.staging_uri, clients("s3"))

    def stage(self, spec: RunSpec) -> StagedRun:
        return self.stager.stage(spec)

    def request(self, staged: StagedRun) -> dict[str, Any]:
        """The ``StartJobRun`` request."""
        params = self.options.spark_submit_parameters
        if self.options.venv_archive_uri:
            params = (
                f"--conf spark.archives={self.options.venv_archive_uri}#environment "
                "--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python "
                "--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python "
                f"--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python {params}"
            ).strip()
        driver: dict[str, Any] = {
            "entryPoint": staged.script_uri,
            "entryPointArguments": ["--spec", staged.spec_uri, "--code", staged.code_uri],
        }
        if params:
            driver["sparkSubmitParameters"] = params
        request: dict[str, Any] = {
            "applicationId": self.options.application_id,
            "executionRoleArn": self.options.execution_role_arn,
            "name": staged.spec.identity.job_name,
            "jobDriver": {"sparkSubmit": driver},
            "tags": staged.spec.identity.tags(),
            "executionTimeoutMinutes": self.options.execution_timeout_minutes,
        }
        if self.options.log_uri:
            request["configurationOverrides"] = {
                "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": self.options.log_uri}}
            }
        return request

    def submit(self, staged: StagedRun) -> JobHandle:
        run = self.es.start_job_run(**self.request(staged))
        return self._handle(run["jobRunId"], staged.result_uri)

    def _handle(self, run_id: str, result_uri: str) -> JobHandle:
        url = None
        if self.options.region:
            url = (
                f"https://{self.options.region}.console.aws.amazon.com/emr/home?region={self.options.region}"
                f"#/serverless-applications/{self.options.application_id}/job-runs/{run_id}"
            )
        ids = {"application_id": self.options.application_id, "job_run_id": run_id}
        return JobHandle(self.name, ids, result_uri, url)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        prefix = identity.job_name.rsplit("-", 1)[0] + "-"
        try:
            pages = self.es.get_paginator("list_job_runs").paginate(
                applicationId=self.options.application_id, states=ACTIVE
            )
            runs = [r for page in pages for r in page.get("jobRuns", [])]
        except self.es.exceptions.ResourceNotFoundException:
            return None
        for run in runs:
            if run.get("name", "").startswith(prefix):
                full = self.es.get_job_run(applicationId=self.options.application_id, jobRunId=run["id"])[
                    "jobRun"
                ]
                args = full["jobDriver"]["sparkSubmit"]["entryPointArguments"]
                spec_uri = args[args.index("--spec") + 1]
                return self._handle(run["id"], spec_uri.rsplit("/", 1)[0] + "/result.json")
        return None

    def poll(self, handle: JobHandle) -> JobStatus:
        run = self.es.get_job_run(
            applicationId=handle.ids["application_id"], jobRunId=handle.ids["job_run_id"]
        )
        raw = run["jobRun"]["state"]
        return JobStatus(STATES.get(raw, RUNNING), raw, run["jobRun"].get("stateDetails", ""))

    def cancel(self, handle: JobHandle) -> None:
        self.es.cancel_job_run(applicationId=handle.ids["application_id"], jobRunId=handle.ids["job_run_id"])

    def teardown(self, handle: JobHandle) -> None:
        """Nothing per run: the application is the user's and stops itself when idle."""

    def log_location(self, handle: JobHandle) -> str:
        """The driver's logs under the ``log_uri`` engine option, when one is set."""
        app, run_id = handle.ids["application_id"], handle.ids["job_run_id"]
        if not self.options.log_uri:
            return (
                f"no log_uri engine option: the logs of run {run_id} are in EMR Studio's Spark UI "
                "(managed storage), not in S3"
            )
        return f"{self.options.log_uri.rstrip('/')}/applications/{app}/jobs/{run_id}/SPARK_DRIVER/ (stderr.gz, stdout.gz)"


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "emr_serverless_job_run", "cancel"
# Not CANCELLING: a cancel is already under way.
LIVE = [s for s in ACTIVE if s != "CANCELLING"]


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every live job run (of any application not terminated) carrying a task identity."""
    client = clients("emr-serverless")
    for page in client.get_paginator("list_applications").paginate():
        for app in page.get("applications", []):
            if app.get("state") == "TERMINATED":
                continue
            try:
                runs_pages = client.get_paginator("list_job_runs").paginate(
                    applicationId=app["id"], states=LIVE
                )
                summaries = [r for p in runs_pages for r in p.get("jobRuns", [])]
            except client.exceptions.ResourceNotFoundException:
                continue  # deleted since it was listed (moto: also an application that never ran)
            for summary in summaries:
                run = client.get_job_run(applicationId=app["id"], jobRunId=summary["id"])["jobRun"]
                identity = RunIdentity.from_tags(run.get("tags") or {})
                if identity is None:
                    continue
                yield Resource(
                    RESOURCE_KIND,
                    f"{app['id']}/{run['jobRunId']}",
                    identity,
                    run["state"],
                    run.get("createdAt"),
                    {"application_id": app["id"], "job_run_id": run["jobRunId"]},
                )


def stop_resource(clients: Clients, res: Resource) -> None:
    clients("emr-serverless").cancel_job_run(
        applicationId=res.ids["application_id"], jobRunId=res.ids["job_run_id"]
    )
