"""SageMaker Processing: one processing job per try, running a stage with Spark (``PySparkProcessor``'s request).

The request is the one the SageMaker SDK's ``PySparkProcessor.run(submit_app=...)`` sends: the image,
``ProcessingResources.ClusterConfig`` (count, type, volume), the role, a ``code`` input holding the
job script at ``/opt/ml/processing/input/code/``, ``AppSpecification.ContainerEntrypoint``
``["smspark-submit", <script>]`` with the script's arguments, the environment and the stopping
condition. The script (``job_script.py``) fetches the code bundle named by ``--code`` itself, as on
every other engine; the image must hold Python 3.11 with deltalake and pyarrow (the SageMaker Spark
images do not: build one ``FROM`` them, or a processing image of your own that has ``smspark-submit``
or an entry point of that name).

Job names are ``RunIdentity.job_name`` (``dltrain-<task>-<task key>-t<try>``): a retry lists the task's
InProgress jobs by their common prefix and re-attaches instead of starting a second one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.resources import Clients, Resource
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.engines.sagemaker_jobs import PROCESSING
from airflow_provider_dltrain.engines.staging import StagedResults, Stager
from airflow_provider_dltrain.exceptions import InvalidSpecError

log = logging.getLogger(__name__)

# where PySparkProcessor puts the submitted app, and the command it runs it with
CODE_DIR = "/opt/ml/processing/input/code"
SPARK_SUBMIT = "smspark-submit"


@dataclass(frozen=True)
class SageMakerProcessingOptions(Options):
    """``engine_options`` of ``engine="sagemaker_processing"`` (:class:`SageMakerProcessingEngine`).

    :param staging_uri: ``s3://`` prefix for the spec, script, code bundle and result.
    :param role: the execution role ARN (reads the tables and staging, writes the table).
    :param image_uri: a Spark processing image whose Python has deltalake and pyarrow (e.g. built
        ``FROM`` a ``sagemaker-spark-processing`` image).
    :param instance_type: e.g. ``"ml.m5.xlarge"``.
    :param instance_count: hosts of ``instance_type`` (Spark on YARN).
    :param volume_size_gb: the ML storage volume of each host.
    :param max_runtime_s: ``StoppingCondition.MaxRuntimeInSeconds``: SageMaker stops the job after this.
    :param environment: more (non-secret) environment variables of the container.
    :param network_config: ``NetworkConfig`` (``VpcConfig``, isolation) as SageMaker takes it.
    :param region: for console links (default: the connection's).
    """

    staging_uri: str
    role: str
    image_uri: str
    instance_type: str = "ml.m5.xlarge"
    instance_count: int = 1
    volume_size_gb: int = 30
    max_runtime_s: int = 7200
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    network_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    region: str | None = None

    def check(self) -> None:
        if not self.role or not self.image_uri:
            raise InvalidSpecError(
                "sagemaker_processing needs engine options role (the execution role ARN) and image_uri "
                "(a Spark processing image whose Python has deltalake and pyarrow)"
            )
        if int(self.instance_count) < 1 or int(self.max_runtime_s) < 1:
            raise InvalidSpecError("sagemaker_processing instance_count and max_runtime_s must be >= 1")
        if not str(self.staging_uri).startswith(("s3://", "s3a://")):
            raise InvalidSpecError("sagemaker_processing staging_uri must be an s3:// prefix")
        self._set(
            instance_count=int(self.instance_count),
            volume_size_gb=int(self.volume_size_gb),
            max_runtime_s=int(self.max_runtime_s),
            environment=dict(self.environment or {}),
            network_config=dict(self.network_config or {}),
        )


class SageMakerProcessingEngine(StagedResults):
    """Run stages as SageMaker Processing jobs running Spark (``smspark-submit``); options:
    :class:`SageMakerProcessingOptions`."""

    name = "sagemaker_processing"

    def __init__(self, clients: Any, options: SageMakerProcessingOptions | Mapping[str, Any]) -> None:
        self.options = SageMakerProcessingOptions.of(options)
        self.sagemaker = clients("sagemaker")
        self.stager = Stager(self.options.staging_uri, clients("s3"))

    def stage(self, spec: RunSpec) -> StagedRun:
        return self.stager.stage(spec)

    def request(self, staged: StagedRun) -> dict[str, Any]:
        """The ``CreateProcessingJob`` request (``PySparkProcessor.run(submit_app=<job script>)``'s shape)."""
        identity = staged.spec.identity
        script = staged.script_uri.rsplit("/", 1)[1]
        request: dict[str, Any] = {
            "ProcessingJobName": identity.job_name,
            "ProcessingResources": {
                "ClusterConfig": {
                    "InstanceType": self.options.instance_type,
                    "InstanceCount": self.options.instance_count,
                    "VolumeSizeInGB": self.options.volume_size_gb,
                }
            },
            "AppSpecification": {
                "ImageUri": self.options.image_uri,
                # Not secrets: where the spec and the code bundle are; ``find`` reads them back.
                "ContainerArguments": ["--spec", staged.spec_uri, "--code", staged.code_uri],
                "ContainerEntrypoint": [SPARK_SUBMIT, f"{CODE_DIR}/{script}"],
            },
            "RoleArn": self.options.role,
            "ProcessingInputs": [
                {
                    "InputName": "code",
                    "AppManaged": False,
                    "S3Input": {
                        "S3Uri": staged.script_uri,
                        "LocalPath": CODE_DIR,
                        "S3DataType": "S3Prefix",
                        "S3InputMode": "File",
                        "S3DataDistributionType": "FullyReplicated",
                        "S3CompressionType": "None",
                    },
                }
            ],
            "Environment": {**self.options.environment, "DLTRAIN_ENGINE": self.name},
            "StoppingCondition": {"MaxRuntimeInSeconds": self.options.max_runtime_s},
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(identity.tags().items())],
        }
        if self.options.network_config:
            request["NetworkConfig"] = self.options.network_config
        return request

    def submit(self, staged: StagedRun) -> JobHandle:
        name = PROCESSING.create(self.sagemaker, self.request(staged))
        return PROCESSING.handle(self.name, self.options.region, name, staged.result_uri)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        found = PROCESSING.find(self.sagemaker, identity, _spec_uri)
        return None if found is None else PROCESSING.handle(self.name, self.options.region, *found)

    def poll(self, handle: JobHandle) -> JobStatus:
        return PROCESSING.poll(self.sagemaker, handle.ids["job_name"])

    def cancel(self, handle: JobHandle) -> None:
        PROCESSING.cancel(self.sagemaker, handle.ids["job_name"])

    def teardown(self, handle: JobHandle) -> None:
        """Nothing to remove: a processing job releases its instances when it ends."""

    def log_location(self, handle: JobHandle) -> str:
        """The job's CloudWatch log group and streams (one per host)."""
        name = handle.ids["job_name"]
        return f"CloudWatch log group /aws/sagemaker/ProcessingJobs, log streams {name}/algo-*"


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "sagemaker_processing_job", "stop"


def _spec_uri(job: Mapping[str, Any]) -> str:
    """The staged spec a described processing job runs (its ``--spec`` argument)."""
    args = list((job.get("AppSpecification") or {}).get("ContainerArguments") or [])
    return str(args[args.index("--spec") + 1]) if "--spec" in args else ""


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every InProgress processing job tagged with a task identity (``CreateProcessingJob``'s ``Tags``)."""
    return PROCESSING.live_jobs(clients, RESOURCE_KIND)


def stop_resource(clients: Clients, res: Resource) -> None:
    PROCESSING.stop(clients("sagemaker"), res.ids["job_name"])
