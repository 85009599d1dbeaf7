"""AWS Glue: one Glue job per task (created or updated to this spec), one job run per try.

The job's script is ``job_script.py`` on S3; deltalake and pyarrow come through
``--additional-python-modules`` and the provider plus the user's transform module arrive as the code
bundle the script puts on ``sys.path``. A run carries ``--dltrain-task-key`` so a retry of the task
finds the run an earlier try left running instead of starting a second one, and the rest of its
task's identity (``--dltrain-run-id``, ``--dltrain-dag-id``, …) so ``dltrain reap`` can ask whether
that task still runs.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
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

log = logging.getLogger(__name__)

STATES = {
    "STARTING": PENDING,
    "WAITING": PENDING,
    "RUNNING": RUNNING,
    "STOPPING": RUNNING,
    "SUCCEEDED": SUCCEEDED,
    "FAILED": FAILED,
    "ERROR": FAILED,
    "TIMEOUT": FAILED,
    "EXPIRED": FAILED,
    "STOPPED": CANCELLED,
}
ACTIVE = ("STARTING", "WAITING", "RUNNING", "STOPPING")
DEFAULT_MODULES = ("deltalake==1.6.6", "tenacity>=9")


@dataclass(frozen=True)
class GlueOptions(Options):
    """``engine_options`` of ``engine="glue"`` (:class:`GlueEngine`).

    :param staging_uri: ``s3://`` prefix for the spec, script, code bundle and result.
    :param role: IAM role (name or ARN) the Glue job runs as: it needs the table buckets and staging.
    :param job_name: the Glue job (default: ``dltrain-<dag_id>-<task_id>``); created or updated per run.
    :param glue_version: ``"5.0"`` (Spark 3.5, Python 3.11) or later.
    :param worker_type: e.g. ``"G.1X"``.
    :param number_of_workers: at least 2.
    :param additional_python_modules: pip specs installed on the job (deltalake, …); wheels on S3 too.
    :param default_arguments: more Glue job arguments (``--conf``, ``--enable-metrics``, …).
    :param max_concurrent_runs: of the job; Glue's default of 1 would fail a backfill's second date
        while the first runs.
    :param timeout_minutes: Glue stops the run after this.
    :param region: for console links (default: the connection's).
    """

    staging_uri: str
    role: str
    job_name: str | None = None
    glue_version: str = "5.0"
    worker_type: str = "G.1X"
    number_of_workers: int = 2
    additional_python_modules: Sequence[str] = DEFAULT_MODULES
    default_arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)
    max_concurrent_runs: int = 16
    timeout_minutes: int = 120
    region: str | None = None

    def check(self) -> None:
        if not self.role:
            raise InvalidSpecError("engine option role is required for glue: the IAM role the job runs as")
        if (
            int(self.number_of_workers) < 2
            or int(self.max_concurrent_runs) < 1
            or int(self.timeout_minutes) < 1
        ):
            raise InvalidSpecError(
                "glue number_of_workers must be >= 2, max_concurrent_runs and timeout_minutes >= 1"
            )
        self._set(
            glue_version=str(self.glue_version),
            number_of_workers=int(self.number_of_workers),
            additional_python_modules=tuple(self.additional_python_modules),
            default_arguments=dict(self.default_arguments or {}),
            max_concurrent_runs=int(self.max_concurrent_runs),
            timeout_minutes=int(self.timeout_minutes),
        )


class GlueEngine(StagedResults):
    """Run stages as AWS Glue (Spark) job runs (options: :class:`GlueOptions`)."""

    name = "glue"

    def __init__(self, clients: Any, options: GlueOptions | Mapping[str, Any]) -> None:
        self.options = GlueOptions.of(options)
        self.glue = clients("glue")
        self.stager = Stager(self.options.staging_uri, clients("s3"))

    def _job(self, identity: RunIdentity) -> str:
        if self.options.job_name:
            return self.options.job_name
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{identity.dag_id}-{identity.task_id}")
        return f"dltrain-{name}"[:255]

    def stage(self, spec: RunSpec) -> StagedRun:
        return self.stager.stage(spec)

    def job_definition(self, staged: StagedRun) -> dict[str, Any]:
        """The ``CreateJob`` / ``UpdateJob`` request of this task's Glue job."""
        return {
            "Role": self.options.role,
            "Description": "airflow-provider-dltrain stage job",
            "Command": {"Name": "glueetl", "ScriptLocation": staged.script_uri, "PythonVersion": "3"},
            "DefaultArguments": {
                "--job-language": "python",
                "--additional-python-modules": ",".join(self.options.additional_python_modules),
                "--enable-continuous-cloudwatch-log": "true",
                **self.options.default_arguments,
            },
            "ExecutionProperty": {"MaxConcurrentRuns": self.options.max_concurrent_runs},
            "GlueVersion": self.options.glue_version,
            "WorkerType": self.options.worker_type,
            "NumberOfWorkers": self.options.number_of_workers,
            "Timeout": self.options.timeout_minutes,
        }

    def _ensure_job(self, name: str, staged: StagedRun) -> None:
        definition = self.job_definition(staged)
        try:
            self.glue.get_job(JobName=name)
        except self.glue.exceptions.EntityNotFoundException:
            tags = staged.spec.identity.tags()
            tags.pop("dltrain:run_id")  # the job outlives runs; its runs are found by argument
            self.glue.create_job(Name=name, Tags={"dltrain:managed": "true", **tags}, **definition)
            return
        self.glue.update_job(JobName=name, JobUpdate=definition)

    def submit(self, staged: StagedRun) -> JobHandle:
        name = self._job(staged.spec.identity)
        self._ensure_job(name, staged)
        identity = staged.spec.identity
        run = self.glue.start_job_run(
            JobName=name,
            Arguments={
                "--spec": staged.spec_uri,
                "--code": staged.code_uri,
                "--dltrain-task-key": identity.task_key,
                # The whole identity, for ``dltrain reap``: a job may be shared (``job_name``) or mapped.
                "--dltrain-run-id": identity.run_id,
                "--dltrain-dag-id": identity.dag_id,
                "--dltrain-task-id": identity.task_id,
                "--dltrain-map-index": str(identity.map_index),
            },
        )
        return self._handle(name, run["JobRunId"], staged.result_uri)

    def _handle(self, name: str, run_id: str, result_uri: str) -> JobHandle:
        url = None
        if self.options.region:
            url = (
                f"https://{self.options.region}.console.aws.amazon.com/gluestudio/home?region={self.options.region}"
                f"#/job/{name}/run/{run_id}"
            )
        return JobHandle(self.name, {"job_name": name, "job_run_id": run_id}, result_uri, url)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        name = self._job(identity)
        try:
            pages = self.glue.get_paginator("get_job_runs").paginate(JobName=name)
            runs = [r for page in pages for r in page.get("JobRuns", [])]
        except self.glue.exceptions.EntityNotFoundException:
            return None
        for run in runs:
            args = run.get("Arguments") or {}
            if run.get("JobRunState") in ACTIVE and args.get("--dltrain-task-key") == identity.task_key:
                spec_uri = args.get("--spec", "")
                return self._handle(name, run["Id"], spec_uri.rsplit("/", 1)[0] + "/result.json")
        return None

    def poll(self, handle: JobHandle) -> JobStatus:
        run = self.glue.get_job_run(
            JobName=handle.ids["job_name"], RunId=handle.ids["job_run_id"], PredecessorsIncluded=False
        )["JobRun"]
        raw = run["JobRunState"]
        return JobStatus(STATES.get(raw, RUNNING), raw, run.get("ErrorMessage", ""))

    def cancel(self, handle: JobHandle) -> None:
        out = self.glue.batch_stop_job_run(
            JobName=handle.ids["job_name"], JobRunIds=[handle.ids["job_run_id"]]
        )
        for error in out.get("Errors", []):
            log.info("stop of %s: %s", handle.ids, error.get("ErrorDetail", {}).get("ErrorMessage"))

    def teardown(self, handle: JobHandle) -> None:
        """Nothing per run: the Glue job definition stays for the next date (no cost while idle)."""

    def log_location(self, handle: JobHandle) -> str:
        """The run's CloudWatch log groups and stream (the stream is named after the run id)."""
        run_id = handle.ids["job_run_id"]
        run = self.glue.get_job_run(JobName=handle.ids["job_name"], RunId=run_id, PredecessorsIncluded=False)
        group = str(run["JobRun"].get("LogGroupName") or "/aws-glue/jobs").rstrip("/")
        where = f"CloudWatch log group {group}/output (errors: {group}/error), log stream {run_id}"
        continuous = self.options.default_arguments.get("--continuous-log-logGroup")
        return where + (f"; continuous logs: log group {continuous}" if continuous else "")


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "glue_job_run", "stop"
LIVE = ["STARTING", "RUNNING", "WAITING"]


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every live run of our jobs (tagged ``dltrain:managed``) whose arguments name a task."""
    glue = clients("glue")
    # ListJobs filters by tag in one call (moto too); GetJobs would need a GetTags per job.
    pages = glue.get_paginator("list_jobs").paginate(Tags={"dltrain:managed": "true"})
    job_tags: _GlueJobTags | None = None
    for name in (n for page in pages for n in page.get("JobNames", [])):
        try:
            runs_pages = glue.get_paginator("get_job_runs").paginate(JobName=name)
            runs = [r for page in runs_pages for r in page.get("JobRuns", [])]
        except glue.exceptions.EntityNotFoundException:
            continue  # deleted since it was listed
        for run in runs:
            args = run.get("Arguments") or {}
            if run.get("JobRunState") not in LIVE or "--dltrain-run-id" not in args:
                continue
            if "--dltrain-task-id" not in args:  # a run started before runs carried the whole identity
                job_tags = job_tags or _GlueJobTags(clients)
                args = {**job_tags.arguments(name), **args}
            yield Resource(
                RESOURCE_KIND,
                f"{name}/{run['Id']}",
                _identity_from_arguments(args),
                run["JobRunState"],
                run.get("StartedOn"),
                {"job_name": name, "job_run_id": run["Id"]},
            )


def stop_resource(clients: Clients, res: Resource) -> None:
    out = clients("glue").batch_stop_job_run(JobName=res.ids["job_name"], JobRunIds=[res.ids["job_run_id"]])
    errors = [e.get("ErrorDetail", {}).get("ErrorMessage", "") for e in out.get("Errors", [])]
    if errors:
        raise RuntimeError("; ".join(errors))


def _identity_from_arguments(args: Mapping[str, str]) -> RunIdentity:
    return RunIdentity(
        dag_id=args.get("--dltrain-dag-id", "adhoc"),
        run_id=args["--dltrain-run-id"],
        task_id=args.get("--dltrain-task-id", "adhoc"),
        map_index=int(args.get("--dltrain-map-index", "-1")),
    )


class _GlueJobTags:
    """A job's identity tags as run arguments (``arn:aws:glue:<region>:<account>:job/<name>``)."""

    def __init__(self, clients: Clients) -> None:
        self.glue = clients("glue")
        account = clients("sts").get_caller_identity()["Account"]
        self.prefix = f"arn:aws:glue:{self.glue.meta.region_name}:{account}:job/"

    def arguments(self, job_name: str) -> dict[str, str]:
        tags = self.glue.get_tags(ResourceArn=self.prefix + job_name).get("Tags", {})
        names = {"dltrain:dag_id": "--dltrain-dag-id", "dltrain:task_id": "--dltrain-task-id"}
        names["dltrain:map_index"] = "--dltrain-map-index"
        return {arg: tags[tag] for tag, arg in names.items() if tag in tags}
