"""The data plane of the fake AWS: runs the scripts that moto only records.

moto accepts Glue job runs, EMR steps and EMR Serverless job runs but never executes anything. The
``LocalCloudExecutor`` runs in the moto server's process, polls the backends, and for each new job downloads
its script from moto S3 and runs ``python <script> <args>`` in a subprocess. The per-service modules
(``fake_glue``, ``fake_emr``, …) decide what is new, which script and arguments a job has, and how the
outcome is written back to the moto object; this module owns the processes.
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


@dataclass
class LocalJob:
    key: tuple[str, ...]
    engine: str
    workdir: Path
    proc: subprocess.Popen
    on_exit: ExitCallback
    log_prefix: str | None = None  # s3://bucket/prefix/ that receives stdout and stderr at the end
    cancelled: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def stdout_path(self) -> Path:
        return self.workdir / "stdout"

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "stderr"


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
        poll_s: float = 0.1,
        workdir: Path | None = None,
        pid_file: Path | None = None,
    ) -> None:
        self.endpoint = endpoint
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
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
    ) -> LocalJob:
        """Download ``script_uri`` from moto S3 and start ``python script *args``; raise on any failure."""
        workdir = self.new_workdir(engine)
        bucket, s3_key = split_s3_uri(script_uri)
        script = workdir / (Path(s3_key).name or "script.py")
        body = self._s3.get_object(Bucket=bucket, Key=s3_key)["Body"].read()
        script.write_bytes(body)
        job = self.start_process(
            key,
            engine,
            workdir,
            [sys.executable, str(script), *args],
            on_exit,
            region=region,
            log_prefix=log_prefix,
        )
        log.info("started %s pid=%s: %s %s", key, job.proc.pid, script_uri, args)
        return job

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
    ) -> LocalJob:
        """Start ``argv`` in ``workdir`` with the fake AWS's environment (plus ``env_extra``)."""
        env = dict(os.environ)
        env.update(env_extra or {})
        env.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": region,
                "AWS_DEFAULT_REGION": region,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "DLTRAIN_ENGINE": engine,
                "PYTHONPATH": os.pathsep.join(p for p in (str(CODE_ROOT), env.get("PYTHONPATH")) if p),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("AWS_PROFILE", None)  # a profile would win over the test keys in some SDKs
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
        job = LocalJob(key, engine, workdir, proc, on_exit, log_prefix)
        with self.lock:
            self.jobs[key] = job
            if self.pid_file is not None:
                with open(self.pid_file, "a") as pids:
                    pids.write(f"{proc.pid} {'/'.join(key)}\n")
        return job

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
