"""SageMaker training on the fake AWS: dltrain training jobs really run, under the SDK's torchrun driver.

moto 5.2.5 creates training jobs Completed, drops ``Environment``, has no StopTrainingJob and lets a
second job take an existing name. Here:

* ``CreateTrainingJob`` refuses a name in use (``ResourceInUse``, as SageMaker does), keeps
  ``Environment`` (DescribeTrainingJob then returns it, as SageMaker does) and creates the job
  ``InProgress``;
* the executor emulates one training container per job (``InstanceCount`` must be 1): it downloads
  the ``code`` channel, restores ``CheckpointConfig.S3Uri`` into a local checkpoint directory, and runs
  the SageMaker SDK's own ``torchrun_driver.py`` (for ``--distribution mpi``: the job's own
  ``ContainerEntrypoint``, which runs ``mpirun`` here) with the ``SM_*`` variables SageMaker sets
  (``SM_ENTRY_SCRIPT`` = the staged ``job_script.py``, ``SM_HPS`` = the job's hyper-parameters,
  ``SM_DISTRIBUTED_CONFIG`` = ``--processes-per-host`` of ``ContainerArguments``), plus the job's
  ``Environment``; checkpoints are uploaded when the process ends; the job then becomes Completed,
  or Failed with ``FailureReason = "AlgorithmError: " + /opt/ml/output/failure`` (else stderr's tail);
* managed spot: a job whose Environment has ``FAKE_SPOT_INTERRUPT=1`` is interrupted once, shortly
  after its first checkpoint appears (mid-epoch when epochs take a while): the process group is
  killed, its checkpoints are uploaded, and the job restarts on a "new instance" whose checkpoint
  directory is restored from S3 only - the secondary status shows ``Interrupted`` then ``Restarting``;
* in container mode (the fake started with images) the job runs as SageMaker runs it: its
  ``ContainerEntrypoint`` and ``ContainerArguments`` in its ``TrainingImage``, with the job's
  directory mounted as ``/opt/ml`` (``input/config``, ``input/data/<channel>``, ``checkpoints``,
  ``output/failure``), the environment SageMaker sets and nothing from the test's Python;
* jobs without a ``spec`` hyper-parameter (not ours) complete at once, as moto made them.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign, attr-defined"

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import time
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
from airflow_provider_dltrain.utils.ports import free_port

log = logging.getLogger("fake_aws.sagemaker")
STOPPABLE = {"InProgress", "Stopping"}
INTERRUPT_ENV = "FAKE_SPOT_INTERRUPT"
INTERRUPT_DELAY_S = 0.3

# Patches the SDK driver's failure file path (fixed at /opt/ml/output/failure) and runs it.
DRIVER_SHIM = """\
import os, runpy, sys
drivers = sys.argv[1]
sys.path.insert(0, drivers)
import common.utils
common.utils.FAILURE_FILE = os.environ["DLTRAIN_FAILURE_FILE"]
script = os.path.join(drivers, "distributed_drivers", "torchrun_driver.py")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""


def job_key(account: str, region: str, name: str) -> tuple[str, ...]:
    return ("sagemaker", account, region, name)


def set_status(job: Any, status: str, secondary: str, reason: str | None = None) -> None:
    now = utcnow()
    job.training_job_status = status
    job.secondary_status = secondary
    job.last_modified_time = now
    job.secondary_status_transitions.append(
        {"Status": secondary, "StartTime": now, "StatusMessage": secondary}
    )
    if status not in STOPPABLE:
        job.training_end_time = now
    if reason:
        job.failure_reason = reason  # moto builds the response from __dict__: becomes FailureReason


def drivers_dir() -> Path:
    """The installed SageMaker SDK's container drivers (found without importing the SDK)."""
    spec = importlib.util.find_spec("sagemaker")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the sagemaker SDK is not installed: its torchrun driver runs the jobs")
    return Path(next(iter(spec.submodule_search_locations))) / "train" / "container_drivers"


class Container:
    """One emulated training container of a job: its directories, environment and checkpoint sync."""

    def __init__(self, ex: LocalCloudExecutor, job: Any, region: str) -> None:
        self.ex, self.job, self.region = ex, job, region
        self.root = ex.new_workdir("sagemaker")
        self.code = self.root / "input" / "data" / "code"
        self.checkpoints = self.root / "checkpoints"
        self.failure_file = self.root / "output" / "failure"
        self.interrupted = False
        self.in_container = ex.containers is not None

    def path(self, local: Path) -> str:
        """Where ``local`` (under the job's directory) is seen by the job: under ``/opt/ml`` in a container."""
        return f"/opt/ml/{local.relative_to(self.root).as_posix()}" if self.in_container else str(local)

    def _download_prefix(self, uri: str, target: Path) -> None:
        bucket, prefix = split_s3_uri(uri.rstrip("/") + "/_")
        prefix = prefix[:-1]
        s3 = self.ex._s3
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                path = target / obj["Key"][len(prefix) :]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())

    def restore_checkpoints(self) -> None:
        shutil.rmtree(self.checkpoints, ignore_errors=True)  # a new instance starts empty
        self.checkpoints.mkdir(parents=True)
        uri = (self.job.checkpoint_config or {}).get("S3Uri")
        if uri:
            self._download_prefix(uri, self.checkpoints)

    def upload_checkpoints(self) -> None:
        uri = (self.job.checkpoint_config or {}).get("S3Uri")
        if not uri or not self.checkpoints.exists():
            return
        bucket, prefix = split_s3_uri(uri.rstrip("/") + "/_")
        for path in self.checkpoints.rglob("*"):
            if path.is_file() and not path.name.endswith(".tmp"):
                key = prefix[:-1] + path.relative_to(self.checkpoints).as_posix()
                self.ex._s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())

    def environment(self) -> dict[str, str]:
        job = self.job
        args = list(job.algorithm_specification.get("ContainerArguments") or [])
        per_host = int(args[args.index("--processes-per-host") + 1]) if "--processes-per-host" in args else 1
        env = {str(k): str(v) for k, v in (getattr(job, "environment", None) or {}).items()}
        env.update(
            {
                "SM_ENTRY_SCRIPT": self.path(self.code / "job_script.py"),
                "SM_HPS": json.dumps(job.hyper_parameters or {}),
                "SM_DISTRIBUTED_CONFIG": json.dumps({"process_count_per_node": per_host}),
                "SM_HOST_COUNT": "1",
                "SM_HOSTS": '["algo-1"]',
                "SM_CURRENT_HOST": "algo-1",
                "SM_CURRENT_INSTANCE_TYPE": job.resource_config["InstanceType"],
                "TRAINING_JOB_NAME": job.training_job_name,
                "DLTRAIN_CHECKPOINT_DIR": self.path(self.checkpoints),
                "DLTRAIN_FAILURE_FILE": self.path(self.failure_file),
                # torchrun's rendezvous port (29500 by default, its PET_ variable): a real host runs
                # one job, but here jobs of tests running side by side share this machine
                "PET_MASTER_PORT": str(free_port()),
            }
        )
        if not self.in_container:
            # a container has /opt/ml/input/config; the driver calls the ``torchrun`` next to this Python
            env["SM_INPUT_CONFIG_DIR"] = str(self.root / "input" / "config")
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return env

    def download_channels(self) -> None:
        """Every S3 input channel into ``input/data/<channel>/``, as SageMaker does before starting."""
        for channel in self.job.input_data_config or []:
            source = channel["DataSource"]["S3DataSource"]["S3Uri"]
            target = self.root / "input" / "data" / channel["ChannelName"]
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            self._download_prefix(source, target)

    def write_config(self) -> None:
        """``resourceconfig.json`` and ``hyperparameters.json``, as SageMaker writes them into a container."""
        config = self.root / "input" / "config"
        config.mkdir(parents=True, exist_ok=True)
        resource = {"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}
        (config / "resourceconfig.json").write_text(json.dumps(resource))
        (config / "hyperparameters.json").write_text(json.dumps(self.job.hyper_parameters or {}))

    def start(self) -> None:
        self.write_config()
        self.download_channels()
        self.restore_checkpoints()
        self.failure_file.unlink(missing_ok=True)
        self.failure_file.parent.mkdir(parents=True, exist_ok=True)
        key = job_key(self.job.account_id, self.region, self.job.training_job_name)
        self.started = time.monotonic()
        container = None
        if self.in_container:
            spec = self.job.algorithm_specification
            entry = [*(spec.get("ContainerEntrypoint") or []), *(spec.get("ContainerArguments") or [])]
            image = spec.get("TrainingImage") or ""
            container = ContainerSpec(
                image, {str(self.root): "/opt/ml"}, "/opt/ml/code", entrypoint=entry[0] if entry else None
            )
            command = entry[1:] if entry else ["train"]  # no entry point: SageMaker runs ``<image> train``
        else:
            command = self.command()
        self.ex.start_process(
            key,
            "sagemaker",
            self.root,
            command,
            self.on_exit,
            region=self.region,
            env_extra=self.environment(),
            container=container,
        )

    def command(self) -> list[str]:
        """torchrun jobs: the SDK's torchrun driver. MPI jobs: the job's own ContainerEntrypoint and
        ContainerArguments (``mpirun`` on this machine), with ``/opt/ml/input/data`` mapped here."""
        spec = self.job.algorithm_specification
        args = list(spec.get("ContainerArguments") or [])
        if "--distribution" in args and args[args.index("--distribution") + 1] == "mpi":
            entry = [*(spec.get("ContainerEntrypoint") or []), *args]
            data = str(self.root / "input" / "data")
            argv = [a.replace("/opt/ml/input/data", data) for a in entry]
            return [sys.executable, *argv[1:]] if argv and argv[0].startswith("python") else argv
        shim = self.root / "run_driver.py"
        shim.write_text(DRIVER_SHIM)
        return [sys.executable, str(shim), str(drivers_dir())]

    def on_exit(self, returncode: int, message: str) -> None:
        self.upload_checkpoints()
        if returncode == 0:
            set_status(self.job, "Completed", "Completed")
            return
        reason = self.failure_file.read_text().strip() if self.failure_file.exists() else ""
        reason = reason or message
        log.warning(
            "job %s failed; stdout tail:\n%s", self.job.training_job_name, _tail(self.root / "stdout")
        )
        set_status(self.job, "Failed", "Failed", f"AlgorithmError: {reason}"[:1024])

    def maybe_interrupt(self) -> None:
        """Emulate a spot reclaim once, just after the first checkpoint appeared."""
        env = getattr(self.job, "environment", None) or {}
        if self.interrupted or not self.job.enable_managed_spot_training or env.get(INTERRUPT_ENV) != "1":
            return
        if not any(p.suffix == ".pt" for p in self.checkpoints.glob("*")):
            self.first_seen = None
            return
        self.first_seen = getattr(self, "first_seen", None) or time.monotonic()
        if time.monotonic() - self.first_seen < INTERRUPT_DELAY_S:
            return
        self.interrupted = True
        key = job_key(self.job.account_id, self.region, self.job.training_job_name)
        self.ex.kill(key)
        self.upload_checkpoints()
        set_status(self.job, "InProgress", "Interrupted")
        log.info("interrupted spot job %s; restarting", self.job.training_job_name)
        set_status(self.job, "InProgress", "Restarting")
        self.start()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


CONTAINERS: dict[tuple[str, ...], Container] = {}


def scan(ex: LocalCloudExecutor) -> None:
    for account, region, backend in iter_backends(sm_models.sagemaker_backends):
        for job in list(backend.training_jobs.values()):
            key = job_key(account, region, job.training_job_name)
            if key in CONTAINERS and ex.is_running(key):
                CONTAINERS[key].maybe_interrupt()
            with ex.lock:
                if not ex.claim(key) or job.training_job_status != "InProgress":
                    continue
                if "spec" not in (job.hyper_parameters or {}):
                    set_status(job, "Completed", "Completed")  # not a dltrain job: as moto made it
                    continue
                try:
                    if int(job.resource_config.get("InstanceCount", 1)) != 1:
                        raise ValueError("the fake runs one instance per job")
                    job.account_id = account
                    container = CONTAINERS[key] = Container(ex, job, region)
                    set_status(job, "InProgress", "Training")
                    container.start()
                except Exception as exc:  # one bad job fails alone, visibly
                    set_status(job, "Failed", "Failed", f"fake_aws could not start the job: {exc}")


def install(ex: LocalCloudExecutor, hold_in_progress: bool = True) -> None:
    original_init = sm_models.FakeTrainingJob.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.training_job_status = "InProgress" if hold_in_progress else "Completed"
        self.secondary_status = "Starting" if hold_in_progress else "Completed"
        if hold_in_progress:
            self.training_end_time = None

    sm_models.FakeTrainingJob.__init__ = __init__
    original_create = SageMakerResponse.create_training_job

    def create_training_job(self: SageMakerResponse) -> Any:
        name = self._get_param("TrainingJobName")
        backend = self.sagemaker_backend
        if name in backend.training_jobs:
            raise ResourceInUseException(message=f"Training job names must be unique: {name} exists")
        response = original_create(self)
        backend.training_jobs[name].environment = self._get_param("Environment") or {}
        return response

    SageMakerResponse.create_training_job = create_training_job

    def stop_training_job(self: SageMakerResponse) -> EmptyResult:
        name = self._get_param("TrainingJobName")
        backend = self.sagemaker_backend
        with ex.lock:
            job = backend.training_jobs.get(name)
            if job is None:
                arn = sm_models.FakeTrainingJob.arn_formatter(name, backend.account_id, backend.region_name)
                raise ValidationError(message=f"Could not find training job '{arn}'.")
            if job.training_job_status not in STOPPABLE:
                raise ValidationError(
                    message=f"The request was rejected because the training job is in status "
                    f"{job.training_job_status}."
                )
            ex.kill(job_key(backend.account_id, backend.region_name, name))
            set_status(job, "Stopped", "Stopped")
        return EmptyResult()

    SageMakerResponse.stop_training_job = stop_training_job
    ex.scanners.append(scan)
