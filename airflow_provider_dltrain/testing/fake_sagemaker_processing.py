"""SageMaker Processing on the fake AWS: processing jobs really run, in one emulated container each.

moto 5.2.5 creates processing jobs ``Completed``, drops ``ProcessingResources`` and ``Environment``,
lets a second job take an existing name and stops any job, even a finished one. Here:

* ``CreateProcessingJob`` refuses a name in use (``ResourceInUse``, as SageMaker does), keeps
  ``ProcessingResources`` and ``Environment`` (DescribeProcessingJob returns them) and creates the job
  ``InProgress``;
* the executor emulates the job's one container (``InstanceCount`` must be 1): it downloads every
  ``S3Input`` to its ``LocalPath`` under the job's ``/opt/ml/processing`` directory, then runs the
  ``ContainerEntrypoint`` plus ``ContainerArguments``. On the host, ``smspark-submit <app> args`` (the
  command of the SageMaker Spark images) becomes ``python <app> args`` (the entry builds Spark
  ``local[*]``; spark-submit options before the app are dropped) and ``/opt/ml/processing`` paths
  point into the job's directory; in container mode the job runs as SageMaker runs it, its entry
  point in its ``ImageUri`` with the job's directory mounted at ``/opt/ml/processing`` (an image
  without the SageMaker Spark images' ``smspark-submit`` gets a stand-in mounted: the app under the
  image's ``python``, Spark ``local[*]``), so the job has only the image's packages;
* the job becomes ``Completed``, or ``Failed`` with ``FailureReason = "AlgorithmError: " +`` stderr's
  tail and ``ExitMessage`` set, as SageMaker reports a container that exited non-zero;
* ``StopProcessingJob`` kills the job and makes it ``Stopped``; a job not in progress is refused.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign, attr-defined"

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from moto.core.responses import EmptyResult
from moto.core.utils import utcnow
from moto.sagemaker import models as sm_models
from moto.sagemaker.exceptions import ResourceInUseException, ValidationError
from moto.sagemaker.responses import SageMakerResponse

from airflow_provider_dltrain.testing.local_executor import (
    ContainerSpec,
    LocalCloudExecutor,
    iter_backends,
    split_s3_uri,
)

log = logging.getLogger("fake_aws.sagemaker_processing")
ROOT = "/opt/ml/processing"
SPARK_SUBMIT = "smspark-submit"
# spark-submit options taking a value, which come before the app in ``ContainerEntrypoint``
VALUED_OPTIONS = {"--py-files", "--jars", "--files", "--class", "--local-spark-event-logs-dir"}
# in a container: ``smspark-submit [options] app args`` as the app under the image's python
SPARK_SUBMIT_STUB = "\n".join(
    [
        "#!/bin/sh",
        "while [ $# -gt 0 ]; do",
        '  case "$1" in',
        f"    {'|'.join(sorted(VALUED_OPTIONS))}) shift 2 ;;",
        "    --*) shift ;;",
        "    *) break ;;",
        "  esac",
        "done",
        'exec python "$@"',
        "",
    ]
)
STUB_DIR = "/opt/fake-sagemaker/bin"


def job_key(account: str, region: str, name: str) -> tuple[str, ...]:
    return ("sagemaker-processing", account, region, name)


def set_status(job: Any, status: str, reason: str | None = None) -> None:
    now = utcnow()
    job.processing_job_status = status
    job.last_modified_time = now
    if status not in ("InProgress", "Stopping"):
        job.processing_end_time = now
    if reason:  # moto builds the response from __dict__: these become FailureReason and ExitMessage
        job.failure_reason = reason[:1024]
        job.exit_message = reason[:1024]


def host_command(entry: list[str], root: Path) -> list[str]:
    """The job's command on this machine: ``smspark-submit [options] app args`` -> ``python app args``."""
    argv = [a.replace(ROOT, str(root)) for a in entry]
    if not argv or Path(argv[0]).name != SPARK_SUBMIT:
        return argv
    rest, i = argv[1:], 0
    while i < len(rest) and rest[i].startswith("--"):
        i += 2 if rest[i] in VALUED_OPTIONS else 1
    return [sys.executable, *rest[i:]]


class ProcessingContainer:
    """One emulated processing container: its inputs under ``/opt/ml/processing`` and its process."""

    def __init__(self, ex: LocalCloudExecutor, job: Any, account: str, region: str) -> None:
        self.ex, self.job, self.region = ex, job, region
        self.key = job_key(account, region, job.processing_job_name)
        self.root = ex.new_workdir("sagemaker-processing")

    def download_inputs(self) -> None:
        for item in self.job.processing_inputs or []:
            source = item.get("S3Input")
            if not source:
                continue
            target = self.root / source["LocalPath"][len(ROOT) :].strip("/")
            target.mkdir(parents=True, exist_ok=True)
            bucket, prefix = split_s3_uri(source["S3Uri"])
            base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
            s3 = self.ex._s3
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    path = target / obj["Key"][len(base) :]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())

    def start(self) -> None:
        spec = self.job.app_specification or {}
        entry = [*(spec.get("ContainerEntrypoint") or []), *(spec.get("ContainerArguments") or [])]
        if not entry:
            raise ValueError(
                "the job has no ContainerEntrypoint (an image's own entry point needs container mode)"
            )
        self.download_inputs()
        env = {str(k): str(v) for k, v in (getattr(self.job, "environment", None) or {}).items()}
        env["PROCESSING_JOB_NAME"] = self.job.processing_job_name
        container = None
        command = host_command(entry, self.root)
        if self.ex.containers is not None:
            mounts, entrypoint = {str(self.root): ROOT}, entry[0]
            if entrypoint == SPARK_SUBMIT:
                stubs = self.ex.new_workdir("sagemaker-processing-bin")
                (stubs / SPARK_SUBMIT).write_text(SPARK_SUBMIT_STUB)
                (stubs / SPARK_SUBMIT).chmod(0o755)
                mounts[str(stubs)] = STUB_DIR
                entrypoint = f"{STUB_DIR}/{SPARK_SUBMIT}"
            container = ContainerSpec(spec.get("ImageUri") or "", mounts, ROOT, entrypoint=entrypoint)
            command = entry[1:]
        self.ex.start_process(
            self.key,
            "sagemaker_processing",
            self.root,
            command,
            self.on_exit,
            region=self.region,
            env_extra=env,
            container=container,
        )

    def on_exit(self, returncode: int, message: str) -> None:
        if returncode == 0:
            set_status(self.job, "Completed")
            return
        set_status(self.job, "Failed", f"AlgorithmError: {message}")


def scan(ex: LocalCloudExecutor) -> None:
    for account, region, backend in iter_backends(sm_models.sagemaker_backends):
        for job in list(backend.processing_jobs.values()):
            key = job_key(account, region, job.processing_job_name)
            with ex.lock:
                if not ex.claim(key) or job.processing_job_status != "InProgress":
                    continue
                try:
                    resources = (getattr(job, "processing_resources", None) or {}).get("ClusterConfig", {})
                    if int(resources.get("InstanceCount", 1)) != 1:
                        raise ValueError("the fake runs one instance per processing job")
                    ProcessingContainer(ex, job, account, region).start()
                except Exception as exc:  # one bad job fails alone, visibly
                    set_status(job, "Failed", f"fake_aws could not start the job: {exc}")


def install(ex: LocalCloudExecutor) -> None:
    original_init = sm_models.FakeProcessingJob.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.processing_job_status = "InProgress"
        self.processing_end_time = None

    sm_models.FakeProcessingJob.__init__ = __init__
    original_create = SageMakerResponse.create_processing_job

    def create_processing_job(self: SageMakerResponse) -> Any:
        name = self._get_param("ProcessingJobName")
        backend = self.sagemaker_backend
        if name in backend.processing_jobs:
            raise ResourceInUseException(message=f"Processing job names must be unique: {name} exists")
        response = original_create(self)
        job = backend.processing_jobs[name]
        job.environment = self._get_param("Environment") or {}
        job.processing_resources = self._get_param("ProcessingResources") or {}
        return response

    SageMakerResponse.create_processing_job = create_processing_job

    def stop_processing_job(self: SageMakerResponse) -> EmptyResult:
        name = self._get_param("ProcessingJobName")
        backend = self.sagemaker_backend
        with ex.lock:
            job = backend.processing_jobs.get(name)
            if job is None:
                arn = sm_models.FakeProcessingJob.arn_formatter(name, backend.account_id, backend.region_name)
                raise ValidationError(message=f"Could not find processing job '{arn}'.")
            if job.processing_job_status != "InProgress":
                raise ValidationError(
                    message=f"The request was rejected because the processing job is in status "
                    f"{job.processing_job_status}."
                )
            ex.kill(job_key(backend.account_id, backend.region_name, name))
            set_status(job, "Stopped")
        return EmptyResult()

    SageMakerResponse.stop_processing_job = stop_processing_job
    ex.scanners.append(scan)
