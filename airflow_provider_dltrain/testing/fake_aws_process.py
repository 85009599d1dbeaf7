"""The fake AWS as a child process: start it, reach it (endpoint, Airflow connection, clients), stop it.

``start_fake_aws(workdir)`` runs ``python -m airflow_provider_dltrain.testing.fake_aws`` and yields a
:class:`FakeAws`; on exit it stops the server and fails if any job process it started is still alive.
The fake makes fresh random credentials at every start and hands them over in a file only its user can
read (mode 0600, ``--env-file``); a process that cannot read that file cannot use the fake. The
credentials of every fake started by this process are kept by endpoint (:func:`credentials_for`), so
:func:`client` and :func:`connection_json` need only the endpoint.
Nothing here imports moto (the child does); boto3 is imported when a client is made.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from airflow_provider_dltrain.testing.fake_aws_keys import (
    ACCESS_KEY_ENV,
    INSTANCE_PROFILE,
    SECRET_KEY_ENV,
    Keys,
    credentials_for,
    forget,
    read_env_file,
    remember,
)

REGION = "us-east-1"
CONN_ID = "aws"
ENV_FILE_NAME = "fake_aws.env"
READY = "READY "
_CODE_ROOT = Path(__file__).resolve().parents[2]
# Live resources, by service: what the leak check reports (all cost money on real AWS).
EMR_LIVE = ["STARTING", "BOOTSTRAPPING", "RUNNING", "WAITING"]
GLUE_LIVE = {"STARTING", "RUNNING", "STOPPING"}
EC2_LIVE = ["pending", "running", "stopping", "stopped"]
ES_RUN_LIVE = {"SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED"}


def connection_extra(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "region_name": REGION}


def connection_json(endpoint: str, credentials: Keys | None = None) -> str:
    """An Airflow ``aws`` connection to the fake, as the JSON an ``AIRFLOW_CONN_*`` variable holds."""
    key, secret = credentials or credentials_for(endpoint)
    conn = {"conn_type": "aws", "login": key, "password": secret, "extra": connection_extra(endpoint)}
    return json.dumps(conn)


def connection_uri(endpoint: str, credentials: Keys | None = None) -> str:
    """The same connection as an Airflow connection URI."""
    key, secret = (quote(v, safe="") for v in credentials or credentials_for(endpoint))
    return f"aws://{key}:{secret}@/?{urlencode(connection_extra(endpoint))}"


def client_env(endpoint: str, credentials: Keys | None = None) -> dict[str, str]:
    """What points Airflow (connection ``aws``), boto3 and delta-rs in this process at the fake."""
    key, secret = credentials or credentials_for(endpoint)
    return {
        f"AIRFLOW_CONN_{CONN_ID.upper()}": connection_json(endpoint, (key, secret)),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",  # delta-rs refuses http:// endpoints otherwise
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }


# a profile or a session token would win over the fake's keys in some SDKs
CLIENT_ENV_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")


def client(service: str, endpoint: str, *, credentials: Keys | None = None) -> Any:
    """A boto3 client of ``service`` on the fake (no retries: moto answers at once or not at all),
    signing with ``credentials`` (by default those of the fake this process started there)."""
    import boto3
    from botocore.config import Config

    key, secret = credentials or credentials_for(endpoint)
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


@dataclass
class FakeAws:
    """A running fake AWS: its endpoint, the Airflow connection to it, and helpers to set it up."""

    endpoint_url: str
    log_path: Path
    pid_file: Path | None = None
    # container mode: the label value of every container and network the fake creates
    instance: str | None = None
    # the 0600 file the fake wrote its credentials (and the export lines) to
    env_file: Path | None = None

    @property
    def credentials(self) -> Keys:
        """(access key id, secret access key): the only keys the fake accepts."""
        return credentials_for(self.endpoint_url)

    @property
    def conn_id(self) -> str:
        return CONN_ID

    @property
    def instance_profile(self) -> str:
        """The instance profile the fake created for EC2 nodes (``engine_options["instance_profile"]``)."""
        return INSTANCE_PROFILE

    @property
    def conn_uri(self) -> str:
        return connection_uri(self.endpoint_url, self.credentials)

    @property
    def conn_json(self) -> str:
        return connection_json(self.endpoint_url, self.credentials)

    @property
    def env(self) -> dict[str, str]:
        """``AIRFLOW_CONN_AWS`` and the ``AWS_*`` variables for a process that should use the fake."""
        return client_env(self.endpoint_url, self.credentials)

    def client(self, service: str) -> Any:
        return client(service, self.endpoint_url, credentials=self.credentials)

    def create_bucket(self, name: str) -> str:
        self.client("s3").create_bucket(Bucket=name)
        return name

    def create_emr_serverless_app(self, name: str, release_label: str = "emr-7.5.0") -> str:
        """A Spark application; returns its id (what ``engine_options["application_id"]`` takes)."""
        es = self.client("emr-serverless")
        return str(
            es.create_application(name=name, releaseLabel=release_label, type="SPARK")["applicationId"]
        )

    def leaks(self) -> list[str]:
        """Every cluster, job run, started application, training job or instance still alive (and in
        container mode every container of this fake; the instances' network lives as long as the fake)."""
        return leaks(self.endpoint_url) + (
            container_leaks(self.instance, networks=False) if self.instance else []
        )

    def live_job_processes(self) -> list[int]:
        """Process group ids of the jobs this fake started that still have a live process."""
        return live_job_groups(self.pid_file) if self.pid_file else []


def live_job_groups(pid_file: Path) -> list[int]:
    """The process groups listed in a ``--pid-file`` that still have a live process."""
    if not pid_file.exists():
        return []
    groups = {int(line.split()[0]) for line in pid_file.read_text().splitlines() if line.strip()}
    return sorted(g for g in groups if _group_alive(g))


def _group_alive(pgid: int) -> bool:
    """A process of group ``pgid`` is alive (zombies, which have exited, do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: the group exists or not
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


def _server_env(credentials: Keys | None) -> dict[str, str]:
    dropped = ("AWS_ENDPOINT_URL", "AWS_PROFILE", ACCESS_KEY_ENV, SECRET_KEY_ENV)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if credentials is not None:  # the caller's own; by default the fake makes fresh ones
        env[ACCESS_KEY_ENV], env[SECRET_KEY_ENV] = credentials
    # the server (and so its jobs) runs the provider code this process imported, a clone included
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    if str(_CODE_ROOT) not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_CODE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def container_leaks(instance: str, *, networks: bool = True) -> list[str]:
    """Containers (and networks) a fake in container mode created that still exist."""
    from airflow_provider_dltrain.testing.local_executor import labelled

    left = [f"container {n}" for n in labelled("ps", instance)]
    return left + ([f"network {n}" for n in labelled("network", instance)] if networks else [])


@contextlib.contextmanager
def start_fake_aws(
    workdir: Path,
    *,
    verbose: bool = True,
    timeout: float = 60.0,
    images: dict[str, str] | None = None,
    shares: list[Path] | tuple[Path, ...] = (),
    credentials: Keys | None = None,
    host: str = "127.0.0.1",
) -> Iterator[FakeAws]:
    """Run the fake AWS until the ``with`` block ends, its log and job directories under ``workdir``.

    On exit the server is stopped (it kills its jobs); an ``AssertionError`` then names any job process
    still alive (after killing it). Jobs' stdout/stderr stay in ``workdir/jobs/<engine>-*/``.
    With ``images`` (``{"glue": tag, "emr": tag, "train": tag}``) jobs run in containers, ``shares``
    mounted in each; the exit also fails if a container or network of the fake is left. The fake
    makes fresh credentials (``credentials``, when given, are used instead) and writes them to
    ``workdir/fake_aws.env`` (mode 0600), read back here. ``host``: the address it listens on (e.g.
    the Docker bridge's gateway, for containers that are no job of the fake: Kubeflow's nodes).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log_path, pid_file = workdir / "fake_aws.log", workdir / "job_pids.txt"
    env_file = workdir / ENV_FILE_NAME
    pid_file.unlink(missing_ok=True)  # ids of an earlier run's jobs may belong to other processes now
    env_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "airflow_provider_dltrain.testing.fake_aws", "--host", host, "--port", "0"]
    cmd += ["--workdir", str(workdir / "jobs"), "--pid-file", str(pid_file), "--env-file", str(env_file)]
    cmd += ["--verbose"] if verbose else []
    instance = None
    if images:
        instance = f"{os.getpid()}-{time.monotonic_ns() % 10**8}"
        cmd += ["--images", json.dumps(images), "--instance", instance]
        cmd += [arg for share in shares for arg in ("--share", str(share))]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            env=_server_env(credentials),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # a Ctrl-C of the caller reaches the caller, which then stops us
        )
    failed, endpoint = False, ""
    try:
        endpoint = _read_ready(proc, log_path, timeout)
        exported = read_env_file(env_file)
        remember(endpoint, (exported["AWS_ACCESS_KEY_ID"], exported["AWS_SECRET_ACCESS_KEY"]))
        yield FakeAws(endpoint, log_path, pid_file, instance, env_file)
    except BaseException:
        failed = True
        raise
    finally:
        _stop(proc)
        forget(endpoint)
        left = _kill_left_over(pid_file)
        left_containers = container_leaks(instance) if instance else []
        if left_containers:  # remove them whatever happened, and say so below
            _remove_docker_objects(instance or "")
    if left and not failed:
        raise AssertionError(f"job processes outlived the fake AWS: process groups {left} (see {pid_file})")
    if left_containers and not failed:
        raise AssertionError(f"the fake AWS left {left_containers}")


def _remove_docker_objects(instance: str) -> None:
    from airflow_provider_dltrain.testing.local_executor import labelled, remove_containers

    remove_containers(labelled("ps", instance))
    for network in labelled("network", instance):
        subprocess.run(["docker", "network", "rm", network], capture_output=True, timeout=60)


def _kill_left_over(pid_file: Path) -> list[int]:
    """Kill the job process groups still alive after a stop; their ids (none, when the stop worked)."""
    left = live_job_groups(pid_file)
    for pgid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return left


def _read_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> str:
    """The endpoint from the child's ``READY <url>`` line; raises with the child's log on failure.

    Reads the pipe's bytes directly: a buffered ``readline`` after ``select`` would leave the READY
    line in the buffer once the lines before it arrived in the same chunk, and wait forever.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.2):
            chunk = os.read(fd, 65536)
            received += chunk
            for line in received.decode(errors="replace").splitlines():
                if line.startswith(READY):
                    return line.split()[1]
            if not chunk and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    raise RuntimeError(f"the fake AWS did not start (exit code {proc.poll()}); its log {log_path}:\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.stdout is not None:
        proc.stdout.close()


def leaks(endpoint: str) -> list[str]:
    """Every cloud resource on the fake AWS (started by this process) still alive (costing money, on
    real AWS)."""
    found: list[str] = []
    emr = client("emr", endpoint)
    for page in emr.get_paginator("list_clusters").paginate(ClusterStates=EMR_LIVE):
        found += [f"EMR cluster {c['Id']} ({c['Name']}) {c['Status']['State']}" for c in page["Clusters"]]

    glue = client("glue", endpoint)
    for page in glue.get_paginator("get_jobs").paginate():
        for job in page["Jobs"]:
            for runs in glue.get_paginator("get_job_runs").paginate(JobName=job["Name"]):
                found += [
                    f"Glue run {job['Name']}/{r['Id']} {r['JobRunState']}"
                    for r in runs["JobRuns"]
                    if r["JobRunState"] in GLUE_LIVE
                ]
    found += _emr_serverless_leaks(endpoint)
    found += _ec2_leaks(endpoint)

    sm = client("sagemaker", endpoint)
    for status in ("InProgress", "Stopping"):
        for page in sm.get_paginator("list_training_jobs").paginate(StatusEquals=status):
            found += [
                f"SageMaker training job {j['TrainingJobName']} {status}"
                for j in page["TrainingJobSummaries"]
            ]
        for page in sm.get_paginator("list_processing_jobs").paginate(StatusEquals=status):
            found += [
                f"SageMaker processing job {j['ProcessingJobName']} {status}"
                for j in page["ProcessingJobSummaries"]
            ]
    return found


def _emr_serverless_leaks(endpoint: str) -> list[str]:
    found: list[str] = []
    es = client("emr-serverless", endpoint)
    for page in es.get_paginator("list_applications").paginate():
        for app in page["applications"]:
            if app["state"] == "STARTED":
                found.append(f"EMR Serverless application {app['id']} ({app['name']}) STARTED")
            try:
                run_pages = list(es.get_paginator("list_job_runs").paginate(applicationId=app["id"]))
            except es.exceptions.ResourceNotFoundException:
                continue  # moto raises this for an application that never had a run
            for runs in run_pages:
                found += [
                    f"EMR Serverless run {app['id']}/{r['id']} {r['state']}"
                    for r in runs["jobRuns"]
                    if r["state"] in ES_RUN_LIVE
                ]
    return found


def _ec2_leaks(endpoint: str) -> list[str]:
    """Instances not terminated: a training cluster's node, or anything else a test launched."""
    ec2 = client("ec2", endpoint)
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": EC2_LIVE}]
    )
    return [
        f"EC2 instance {i['InstanceId']} {i['State']['Name']}"
        for page in pages
        for r in page["Reservations"]
        for i in r["Instances"]
    ]
