"""SageMaker training: one ``CreateTrainingJob`` per try, built here (boto3 shape, no SDK needed).

The container's entry point is ``sagemaker_launch.py`` from the ``code`` channel: it reads
SageMaker's resource config and starts ``job_script.py --spec <uri> --code <uri>`` (the
hyper-parameters) on every process of every host under torchrun, or under mpirun for Horovod. The
job reads the pinned Delta version itself with its role; rank 0 logs metrics and the model to
the MLflow run the launcher opened and writes its report beside the spec. Checkpoints go to
``/opt/ml/checkpoints``, which SageMaker syncs to ``CheckpointConfig.S3Uri`` and restores when a
managed spot job resumes.

Job names are ``RunIdentity.job_name`` (``dltrain-<task>-<task key>-t<try>``): a retry lists the
task's InProgress jobs by their common prefix and re-attaches instead of starting a second one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.engines.base import (
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.resources import Clients, Resource
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.engines.sagemaker_jobs import TRAINING
from airflow_provider_dltrain.engines.staging import Stager, job_script
from airflow_provider_dltrain.engines.train_spec import CHECKPOINT_DIR_ENV, job_tracking_env
from airflow_provider_dltrain.engines.training_engine import TrainingEngine
from airflow_provider_dltrain.exceptions import InvalidSpecError, require

log = logging.getLogger(__name__)

DISTRIBUTIONS = ("torchrun", "mpi")
CODE_DIR = "/opt/ml/input/data/code"
CHECKPOINT_DIR = "/opt/ml/checkpoints"
LAUNCHER = "sagemaker_launch.py"


def _launcher() -> bytes:
    from airflow_provider_dltrain.engines import sagemaker_launch

    return Path(sagemaker_launch.__file__ or "").read_bytes()


@dataclass(frozen=True)
class SageMakerOptions(Options):
    """``backend_options`` of ``backend="sagemaker"`` (:class:`SageMakerEngine`).

    :param staging_uri: ``s3://`` prefix for the spec, code, results, checkpoints and outputs.
    :param role: the execution role ARN (reads the tables and staging, writes checkpoints).
    :param image_uri: the training image; default: the PyTorch training image for
        ``framework_version``/``py_version`` (needs the ``[sagemaker]`` extra to look it up).
    :param instance_type: e.g. ``"ml.g5.xlarge"``.
    :param instance_count: hosts of ``instance_type``.
    :param processes_per_host: ranks per host (GPUs per instance, or 1-2 on CPU).
    :param distribution: ``"torchrun"`` or ``"mpi"`` (Horovod; the image needs sshd, mpirun, horovod).
    :param use_spot: managed spot training; the job resumes from the last checkpoint after an interruption.
    :param max_run_s: ``StoppingCondition.MaxRuntimeInSeconds``.
    :param max_wait_s: spot only: bounds waiting for capacity plus running (default ``2 x max_run_s``).
    :param checkpoint_uri: where checkpoints persist (default: per task and inputs under staging).
    :param tracking_secret: a Secrets Manager secret (name/ARN) with the MLflow credentials as JSON;
        the job reads it with its role. Without one, credentials of the ``mlflow`` connection are
        put in the job's environment (visible to whoever may describe the job).
    :param environment: more (non-secret) environment variables for the job.
    :param volume_size_gb: the ML storage volume of each host.
    :param vpc_config: ``{"Subnets": [...], "SecurityGroupIds": [...]}`` to reach a private MLflow.
    :param framework_version: of the default PyTorch image.
    :param py_version: of the default PyTorch image.
    :param mpi_options: more ``mpirun`` options (``distribution="mpi"``).
    :param region: of the default image and console links (default: the connection's).
    """

    staging_uri: str
    role: str
    image_uri: str | None = None
    instance_type: str = "ml.m5.xlarge"
    instance_count: int = 1
    processes_per_host: int = 1
    distribution: str = "torchrun"
    use_spot: bool = False
    max_run_s: int = 86400
    max_wait_s: int | None = None
    checkpoint_uri: str | None = None
    tracking_secret: str | None = None
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    volume_size_gb: int = 30
    vpc_config: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    framework_version: str = "2.5"
    py_version: str = "py311"
    mpi_options: Sequence[str] = ()
    region: str | None = None

    def check(self) -> None:
        if not self.role or not str(self.role).startswith("arn:"):
            raise InvalidSpecError(
                f"backend option role must be the job's execution role ARN "
                f"(arn:aws:iam::<account>:role/<name>), got {self.role!r}"
            )
        if self.distribution not in DISTRIBUTIONS:
            raise InvalidSpecError(f"distribution must be one of {DISTRIBUTIONS}, got {self.distribution!r}")
        if int(self.instance_count) < 1 or int(self.processes_per_host) < 1:
            raise InvalidSpecError("instance_count and processes_per_host must be >= 1")
        if self.max_wait_s is not None and not self.use_spot:
            raise InvalidSpecError("max_wait_s applies to spot jobs only: set use_spot=True or drop it")
        self._set(
            instance_count=int(self.instance_count),
            processes_per_host=int(self.processes_per_host),
            use_spot=bool(self.use_spot),
            max_run_s=int(self.max_run_s),
            max_wait_s=None if self.max_wait_s is None else int(self.max_wait_s),
            environment={str(k): str(v) for k, v in dict(self.environment or {}).items()},
            volume_size_gb=int(self.volume_size_gb),
            vpc_config=dict(self.vpc_config or {}),
            framework_version=str(self.framework_version),
            mpi_options=tuple(self.mpi_options),
        )
        if self.use_spot and self.wait_s < self.max_run_s:
            raise InvalidSpecError(f"max_wait_s ({self.wait_s}) must be >= max_run_s ({self.max_run_s})")

    @property
    def wait_s(self) -> int:
        """``MaxWaitTimeInSeconds`` of a spot job."""
        return self.max_wait_s if self.max_wait_s is not None else 2 * self.max_run_s


class SageMakerEngine(TrainingEngine):
    """Run ``train(ctx)`` as a SageMaker training job on ``instance_count x processes_per_host`` ranks
    (options: :class:`SageMakerOptions`)."""

    name = "sagemaker"

    def __init__(self, clients: Any, options: SageMakerOptions | Mapping[str, Any]) -> None:
        self.options = SageMakerOptions.of(options)
        self.sagemaker = clients("sagemaker")
        self.stager = Stager(self.options.staging_uri, clients("s3"))
        self._credentials: dict[str, str] = {}

    @property
    def world_size(self) -> int:
        return self.options.instance_count * self.options.processes_per_host

    def set_job_credentials(self, credentials: Mapping[str, str]) -> None:
        """MLflow credentials for the job's environment (used only when no ``tracking_secret``)."""
        self._credentials = dict(credentials)

    # -- request -----------------------------------------------------------------------------------
    def training_image(self) -> str:
        if self.options.image_uri:
            return self.options.image_uri
        image_uris = require("sagemaker.core.image_uris", "sagemaker")
        return str(
            image_uris.retrieve(
                framework="pytorch",
                region=self.options.region or self.sagemaker.meta.region_name,
                version=self.options.framework_version,
                py_version=self.options.py_version,
                instance_type=self.options.instance_type,
                image_scope="training",
            )
        )

    def _code_channel(self) -> str:
        """An S3 prefix holding only the launcher and the job script (SageMaker copies all of it)."""
        launcher, script = _launcher(), job_script()
        key = hashlib.sha256(launcher + b"\0" + script).hexdigest()[:12]
        prefix = self.stager.uri("code", f"sagemaker-{key}")
        self.stager.put_once(f"{prefix}/{LAUNCHER}", launcher)
        self.stager.put_once(f"{prefix}/job_script.py", script)
        return prefix + "/"

    def container_arguments(self) -> list[str]:
        args = [
            "--distribution",
            self.options.distribution,
            "--processes-per-host",
            str(self.options.processes_per_host),
            "--entry",
            f"{CODE_DIR}/job_script.py",
        ]
        for option in self.options.mpi_options:
            args += ["--mpi-option", option]
        return args

    def request(self, staged: StagedRun) -> dict[str, Any]:
        """The ``CreateTrainingJob`` request for ``staged`` (exactly what is sent)."""
        spec = staged.spec
        identity = spec.identity
        environment = {
            **self.options.environment,
            **job_tracking_env(self._credentials, self.options.tracking_secret),
            CHECKPOINT_DIR_ENV: CHECKPOINT_DIR,
            "DLTRAIN_ENGINE": self.name,
        }
        request: dict[str, Any] = {
            "TrainingJobName": identity.job_name,
            "RoleArn": self.options.role,
            "AlgorithmSpecification": {
                "TrainingImage": self.training_image(),
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["python3", f"{CODE_DIR}/{LAUNCHER}"],
                "ContainerArguments": self.container_arguments(),
            },
            # Not secrets: where the spec and the code bundle are. SageMaker hands them to the
            # entry script as ``--spec <uri> --code <uri>``; ``find`` reads them back.
            "HyperParameters": {"spec": staged.spec_uri, "code": staged.code_uri},
            "InputDataConfig": [
                {
                    "ChannelName": "code",
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": self._code_channel(),
                            "S3DataDistributionType": "FullyReplicated",
                        }
                    },
                    "InputMode": "File",
                }
            ],
            "OutputDataConfig": {"S3OutputPath": self.stager.uri("output")},
            "ResourceConfig": {
                "InstanceType": self.options.instance_type,
                "InstanceCount": self.options.instance_count,
                "VolumeSizeInGB": self.options.volume_size_gb,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": self.options.max_run_s},
            "EnableManagedSpotTraining": self.options.use_spot,
            "CheckpointConfig": {"S3Uri": getattr(spec, "checkpoint_uri", None), "LocalPath": CHECKPOINT_DIR},
            "Environment": environment,
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(identity.tags().items())],
        }
        if self.options.use_spot:
            request["StoppingCondition"]["MaxWaitTimeInSeconds"] = self.options.wait_s
        if self.options.vpc_config:
            request["VpcConfig"] = {k: list(v) for k, v in self.options.vpc_config.items()}
        return request

    # -- engine protocol ---------------------------------------------------------------------------
    def submit(self, staged: StagedRun) -> JobHandle:
        name = TRAINING.create(self.sagemaker, self.request(staged))
        return TRAINING.handle(self.name, self.options.region, name, staged.result_uri)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        found = TRAINING.find(
            self.sagemaker, identity, lambda job: (job.get("HyperParameters") or {}).get("spec", "")
        )
        return None if found is None else TRAINING.handle(self.name, self.options.region, *found)

    def poll(self, handle: JobHandle) -> JobStatus:
        return TRAINING.poll(self.sagemaker, handle.ids["job_name"])

    def cancel(self, handle: JobHandle) -> None:
        TRAINING.cancel(self.sagemaker, handle.ids["job_name"])

    def teardown(self, handle: JobHandle) -> None:
        """Nothing to remove: a training job releases its instances when it ends."""


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "sagemaker_training_job", "stop"


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every InProgress training job tagged with a task identity (``CreateTrainingJob``'s ``Tags``)."""
    return TRAINING.live_jobs(clients, RESOURCE_KIND)


def stop_resource(clients: Clients, res: Resource) -> None:
    TRAINING.stop(clients("sagemaker"), res.ids["job_name"])
