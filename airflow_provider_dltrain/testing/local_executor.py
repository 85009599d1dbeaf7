"""The data plane of the fake AWS: runs the scripts that moto only records.

moto accepts Glue job runs, EMR steps and EMR Serverless job runs but never executes anything. The
``LocalCloudExecutor`` runs in the moto server's process, polls the backends, and for each new job downloads
its script from moto S3 and runs ``python <script> <args>`` in a subprocess. The per-service modules
(``fake_glue``, ``fake_emr``, …) decide what is new, which script and arguments a job has, and how the
outcome is written back to the moto object; this module owns the processes.

With :class:`ContainerMode` the jobs run in Docker containers of the service's image instead (Glue
runs in the Glue-like image, EMR steps and EMR Serverless runs in the EMR-like one, SageMaker jobs in
their ``TrainingImage``): with only the packages that image (or the job's own archive or
``--additional-python-modules``) provides, as on AWS. Each container is started by a ``docker run``
client process, which the executor watches like any job process; ``--network host`` keeps the moto
endpoint on 127.0.0.1, and the job's directory (plus any shared directory, e.g. a test's MLflow
store) is mounted at the path the job expects.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

log = logging.getLogger("fake_aws.executor")

# The directory holding this package (a clone, or site-packages): jobs import the same provider code.
CODE_ROOT = Path(__file__).resolve().parents[2]
# How much stderr a failed job reports (Glue ErrorMessage, EMR FailureDetails, ES stateDetails).
ERROR_LINES = 5
ERROR_CHARS = 1000

# on_exit(returncode, error_text) is called under the executor lock once the process is gone,
# unless the job was cancelled: then whoever cancelled it has already written the final state.
ExitCallback = Callable[[int, str], None]


# Every container and network the fake creates carries this label (value: the fake's instance id):
# the leak check lists what is left of one fake by it.
CONTAINER_LABEL = "dltrain.fake-aws"
# Where each service's jobs run in container mode: the key of ``ContainerMode.images``.
IMAGE_OF_ENGINE = {
    "glue": "glue",
    "emr": "emr",
    "emr_serverless": "emr",
    "sagemaker": "train",
    "ec2": "train",
}


@dataclass(frozen=True)
class ContainerMode:
    """Run jobs in containers: ``images`` maps ``glue``/``emr``/``train`` to local image tags."""

    images: dict[str, str]
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # host directories mounted at the same path in every job container (a test's MLflow store, a
    # local lake): what a shared file system or a real service would give the job on AWS
    shares: tuple[str, ...] = ()

    def image(self, engine: str) -> str:
        try:
            return self.images[IMAGE_OF_ENGINE[engine]]
        except KeyError:
            raise ValueError(
                f"no image for {engine} jobs: start the fake with one for {IMAGE_OF_ENGINE.get(engine, engine)!r}"
            ) from None


@dataclass(frozen=True)
class ContainerSpec:
    """How one job runs in a container: its image, command, mounts (host -> container) and cwd."""

    image: str
    mounts: dict[str, str]
    cwd: str
    entrypoint: str | None = None  # None: the image's ENTRYPOINT runs ``argv``
    network: str = "host"
    ip: str | None = None
    hostname: str | None = None


@dataclass
class LocalJob:
    key: tuple[str, ...]
    engine: str
    workdir: Path
    proc: subprocess.Popen
    on_exit: ExitCallback
    log_prefix: str | None = None  # s3://bucket/prefix/ that receives stdout and stderr at the end
    container: str | None = None  # the container's name in container mode
    cancelled: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def stdout_path(self) -> Path:
        return self.workdir / "stdout"

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "stderr"


def venv_archive(words: list[str]) -> str | None:
    """The URI of ``spark.archives=<uri>#environment`` in spark-submit words (the job's venv-pack archive)."""
    for word in " ".join(words).split():
        value = word.partition("spark.archives=")[2]
        for archive in value.split(","):
            uri, _, alias = archive.partition("#")
            if alias == "environment":
                return uri
    return None


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or not key:
        raise ValueError(f"s3 URI needs a bucket and a key: {uri!r}")
    return bucket, key


def iter_backends(backend_dict: Any) -> Iterator[tuple[str, str, Any]]:
    """(account, region, backend) for every backend moto has created so far.

    ``dict.items`` on purpose: moto's ``__getitem__`` creates backends on access, iteration does not.
    """
    for account_id, per_account in list(dict.items(backend_dict)):
        for region, backend in list(dict.items(per_account)):
            yield account_id, region, backend


def error_text(stderr_path: Path, returncode: int) -> str:
    """The last non-empty stderr lines: where a Python traceback puts the exception."""
    try:
        lines = [ln for ln in stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    text = "\n".join(lines[-ERROR_LINES:])
    reason = f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    text = f"{text}\n({reason})" if text else f"Process failed ({reason})"
    # Keep the tail: the exception line is the last one.
    return text[-ERROR_CHARS:]


class LocalCloudExecutor:
    """Polls moto's backends and runs each new job as a local process (see the module docstring)."""

    def __init__(
        self,
        endpoint: str,
        *,
        credentials: tuple[str, str],
        poll_s: float = 0.1,
        workdir: Path | None = None,
        pid_file: Path | None = None,
        containers: ContainerMode | None = None,
    ) -> None:
        self.endpoint = endpoint
        # (access key id, secret): what the fake accepts, and so what its jobs reach it with
        self.credentials = credentials
        self.containers = containers
        self.poll_s = poll_s
        # one line per job started: its process group id, which a parent checks is gone after a stop
        self.pid_file = pid_file
        self._own_workdir = workdir is None
        self.root = Path(workdir or tempfile.mkdtemp(prefix="fake-aws-"))
        self.root.mkdir(parents=True, exist_ok=True)
        # Request threads (stop/cancel/terminate patches) and the poll thread both change job state;
        # re-entrant because a patched API may be called from inside a poll step (auto-terminate).
        self.lock = threading.RLock()
        self.jobs: dict[tuple[str, ...], LocalJob] = {}
        # Keys of every moto object already started, finished or cancelled: never launched twice.
        self.seen: set[tuple[str, ...]] = set()
        self.scanners: list[Callable[[LocalCloudExecutor], None]] = []
        self.closers: list[Callable[[], None]] = []  # run at stop, once every job is gone
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=credentials[0],
            aws_secret_access_key=credentials[1],
            config=Config(retries={"max_attempts": 2}),
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="local-cloud-executor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            for key in list(self.jobs):
                self.kill(key)
        if self.containers is not None:  # started by a client that died before reporting its name
            remove_containers(labelled("ps", self.containers.instance))
        for close in self.closers:
            try:
                close()
            except Exception:
                log.exception("closing %s failed", close)
        if self._own_workdir:
            shutil.rmtree(self.root, ignore_errors=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for scan in self.scanners:
                try:
                    scan(self)
                except Exception:  # a scanner bug must not stop the data plane for every other job
                    log.exception("scanner %s failed", getattr(scan, "__name__", scan))
            try:
                self._reap()
            except Exception:
                log.exception("reaping finished jobs failed")
            self._stop.wait(self.poll_s)

    # -- jobs --------------------------------------------------------------------------------------
    def claim(self, key: tuple[str, ...]) -> bool:
        """True once per key: the caller then owns starting (or failing) that moto object."""
        with self.lock:
            if key in self.seen:
                return False
            self.seen.add(key)
            return True

    def launch(
        self,
        key: tuple[str, ...],
        engine: str,
        script_uri: str,
        args: list[str],
        on_exit: ExitCallback,
        region: str = "us-east-1",
        log_prefix: str | None = None,
        archive_uri: str | None = None,
    ) -> LocalJob:
        """Download ``script_uri`` from moto S3 and start ``python script *args``; raise on any failure.

        In container mode the image's entry point runs ``script *args`` (Glue's installs the
        ``--additional-python-modules`` first); ``archive_uri`` (EMR's ``spark.archives=…#environment``)
        is downloaded next to the script as ``environment.tar.gz``, which the EMR-like image unpacks
        and runs the job with. On the host the test's own Python runs the script.
        """
        workdir = self.new_workdir(engine)
        script = workdir / (Path(split_s3_uri(script_uri)[1]).name or "script.py")
        self.download(script_uri, script)
        if self.containers is None:
            argv = [sys.executable, str(script), *args]
            container = None
        else:
            if archive_uri:
                self.download(archive_uri, workdir / "environment.tar.gz")
            argv = [str(script), *args]
            mounts = {str(workdir): str(workdir)}
            if engine == "glue":  # pip's cache across runs: Glue downloads the modules every time
                mounts[str(self.root / "glue-pip-cache")] = "/root/.cache/pip"
            container = ContainerSpec(self.containers.image(engine), mounts, str(workdir))
        job = self.start_process(
            key, engine, workdir, argv, on_exit, region=region, log_prefix=log_prefix, container=container
        )
        log.info("started %s pid=%s: %s %s", key, job.proc.pid, script_uri, args)
        return job

    def download(self, uri: str, target: Path) -> None:
        bucket, s3_key = split_s3_uri(uri)
        self._s3.download_file(bucket, s3_key, str(target))

    def new_workdir(self, engine: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{engine}-", dir=self.root))

    def start_process(
        self,
        key: tuple[str, ...],
        engine: str,
        workdir: Path,
        argv: list[str],
        on_exit: ExitCallback,
        region: str = "us-east-1",
        log_prefix: str | None = None,
        env_extra: dict[str, str] | None = None,
        container: ContainerSpec | None = None,
        endpoint: str | None = None,
    ) -> LocalJob:
        """Start ``argv`` in ``workdir`` with the job's environment: the AWS variables (this fake's
        endpoint and credentials), ``env_extra``, and on the host the runtime variables of
        :func:`job_base_env` (never the fake's own secrets or the rest of its environment).

        With ``container``, ``argv`` runs in that container; its environment is only the job's (the
        AWS variables and ``env_extra``). ``endpoint``: where the job reaches the fake (default: this
        server's 127.0.0.1 endpoint).
        """
        job_env = dict(env_extra or {})
        job_env.update(
            {
                "AWS_ENDPOINT_URL": endpoint or self.endpoint,
                "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": region,
                "AWS_DEFAULT_REGION": region,
                "AWS_ACCESS_KEY_ID": self.credentials[0],
                "AWS_SECRET_ACCESS_KEY": self.credentials[1],
                "DLTRAIN_ENGINE": engine,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env = job_base_env(os.environ)
        env.update(job_env)
        name = None
        if container is None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH")) if p
            )
        else:
            name = f"fake-aws-{self.containers.instance if self.containers else 'x'}-{uuid.uuid4().hex[:8]}"
            argv = self.docker_run(name, container, argv, sorted(job_env))
        with open(workdir / "stdout", "wb") as out, open(workdir / "stderr", "wb") as err:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                # Own process group: cancel/stop kills the job's whole tree (spark, torchrun workers).
                start_new_session=True,
            )
        job = LocalJob(key, engine, workdir, proc, on_exit, log_prefix, container=name)
        with self.lock:
            self.jobs[key] = job
            if self.pid_file is not None:
                with open(self.pid_file, "a") as pids:
                    pids.write(f"{proc.pid} {'/'.join(key)}\n")
        return job

    def docker_run(self, name: str, spec: ContainerSpec, argv: list[str], env_names: list[str]) -> list[str]:
        """The ``docker run`` command of one job container (values of ``env_names`` come from the
        client's environment, so no secret appears on a command line)."""
        mode = self.containers
        if mode is None:
            raise RuntimeError("docker_run needs container mode")
        command = ["docker", "run", "--rm", "--name", name, "--label", f"{CONTAINER_LABEL}={mode.instance}"]
        command += ["--pull", "never", "--network", spec.network, "--workdir", spec.cwd]
        if spec.ip:
            command += ["--ip", spec.ip]
        if spec.hostname:
            command += ["--hostname", spec.hostname]
        mounts = {**{share: share for share in mode.shares}, **spec.mounts}
        for host, inside in mounts.items():
            command += ["--volume", f"{host}:{inside}"]
        for env_name in env_names:
            command += ["--env", env_name]
        if spec.entrypoint is not None:
            command += ["--entrypoint", spec.entrypoint]
        return [*command, spec.image, *argv]

    def is_running(self, key: tuple[str, ...]) -> bool:
        with self.lock:
            return key in self.jobs

    def kill(self, key: tuple[str, ...]) -> bool:
        """Stop a job's process group and forget it; its on_exit is not called. True if it was running."""
        with self.lock:
            self.seen.add(key)  # a job cancelled before the poll thread saw it must never start
            job = self.jobs.pop(key, None)
        if job is None:
            return False
        job.cancelled = True
        _kill_group(job.proc)
        if job.container:  # the client is gone; its container may not be
            remove_containers([job.container])
        self._upload_logs(job)
        log.info("killed %s", key)
        return True

    def _reap(self) -> None:
        for key, job in list(self.jobs.items()):
            returncode = job.proc.poll()
            if returncode is None:
                continue
            with self.lock:
                if self.jobs.get(key) is not job:  # killed by a cancel meanwhile
                    continue
                del self.jobs[key]
                # Logs first: a client that sees the terminal state can read them at once.
                self._upload_logs(job)
                message = "" if returncode == 0 else error_text(job.stderr_path, returncode)
                try:
                    job.on_exit(returncode, message)
                except Exception:
                    log.exception("writing the outcome of %s failed", key)
            log.info("finished %s rc=%s", key, returncode)

    def _upload_logs(self, job: LocalJob) -> None:
        if not job.log_prefix:
            return
        try:
            bucket, prefix = split_s3_uri(job.log_prefix.rstrip("/") + "/_")
            prefix = prefix[:-1]
            for name in ("stdout", "stderr"):
                path = job.workdir / name
                if path.exists():
                    self._s3.put_object(Bucket=bucket, Key=prefix + name, Body=path.read_bytes())
        except Exception:  # logs are a convenience; a missing bucket must not change the job's outcome
            log.warning("could not upload logs of %s to %s", job.key, job.log_prefix, exc_info=True)


# What a job process on the host inherits from the fake's environment: how to find programs, Python,
# Java and Spark, the locale, TLS roots and proxies, the docker client's settings (container mode) and
# the provider's own non-secret settings. Nothing else: the fake's environment may hold secrets (in the
# compose stack, the S3 store's keys) that a submitted script must not read.
JOB_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
        "JAVA_HOME", "JAVA_TOOL_OPTIONS", "SPARK_HOME", "HADOOP_HOME", "VIRTUAL_ENV", "PYTHONPATH",
        "PYTHONHASHSEED", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
        "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "GIT_PYTHON_REFRESH",
        "LD_LIBRARY_PATH",
    }
)  # fmt: skip
# the locale, Spark, pip, the provider, MLflow, and the MPI / Horovod / torch / OpenMP runtimes
JOB_ENV_PREFIXES = (
    "LC_", "PYSPARK_", "PIP_", "DLTRAIN_", "MLFLOW_", "OMPI_", "PMIX_", "PRTE_", "HYDRA_", "HOROVOD_",
    "TORCH_", "OMP_", "MKL_", "NCCL_", "CUDA_", "GLOO_",
)  # fmt: skip
# never passed on, even under an allowed prefix
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL")


def job_base_env(environ: Any) -> dict[str, str]:
    """The variables of ``environ`` a job process may inherit (see ``JOB_ENV_NAMES``)."""
    return {
        name: value
        for name, value in environ.items()
        if (name in JOB_ENV_NAMES or name.startswith(JOB_ENV_PREFIXES))
        and not any(word in name.upper() for word in SECRET_WORDS)
    }


def remove_containers(names: list[str]) -> None:
    if names:
        subprocess.run(["docker", "rm", "--force", *names], capture_output=True, timeout=60)


def labelled(kind: str, instance: str) -> list[str]:
    """Names of the containers (``kind="ps"``) or networks (``"network"``) of one fake instance."""
    command = [
        "docker",
        kind,
        "ls",
        "--filter",
        f"label={CONTAINER_LABEL}={instance}",
        "--format",
        "{{.Name}}",
    ]
    if kind == "ps":
        command = [
            "docker",
            "ps",
            "--all",
            "--filter",
            f"label={CONTAINER_LABEL}={instance}",
            "--format",
            "{{.Names}}",
        ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return result.stdout.split()


def _kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    """SIGTERM the process group, then SIGKILL it (children that outlive their leader included)."""
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    _signal_group(proc, signal.SIGKILL)
    proc.wait(timeout=10)


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    # The group may be gone already (the job ended on its own); that is the goal, not an error.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
