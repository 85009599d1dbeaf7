"""Any Spark cluster (``spark://``, YARN, Kubernetes): ``spark-submit`` of the same job script.

The driver runs where ``spark-submit`` runs (client mode: on the Airflow worker; executors on the
cluster). The job writes its result next to its spec, so the outcome survives this process; the
``spark-submit`` process runs in its own session, is recorded in ``runs/<task_key>/active.json`` so
a retry on the same machine re-attaches to it, and is killed (its whole process group) on cancel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.engines.staging import StagedResults, Stager
from airflow_provider_dltrain.exceptions import InvalidSpecError


def spark_submit_path() -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the one inside the installed pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
    return os.path.join(home, "bin", "spark-submit")


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (psutil's create time, seconds since the epoch): with the pid, it names
    one process for good."""
    import psutil

    try:
        return repr(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def _alive(pid: int, started: str | None = None) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        status, created = proc.status(), repr(proc.create_time())
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    # A finished child that nobody waited for is a zombie: gone for our purposes. A pid reused by
    # another process since (a retry hours later on a busy worker) is not our job either: attaching
    # to it would wait on an unrelated process, with the job's result already written. (A handle
    # recorded before create times were used holds clock ticks, without a ".": not compared.)
    if started is not None and "." in started and created != started:
        return False
    return status != psutil.STATUS_ZOMBIE


def _running(handle: JobHandle) -> bool:
    return _alive(int(handle.ids["pid"]), handle.ids.get("started"))


@dataclass(frozen=True)
class SparkSubmitOptions(Options):
    """``engine_options`` of ``engine="spark_submit"`` (:class:`SparkSubmitEngine`).

    :param master: ``spark://host:7077``, ``yarn``, ``k8s://…``.
    :param staging_uri: a directory every node can read (or an ``s3://`` prefix).
    :param spark_submit_args: more arguments (``--conf k=v``, ``--executor-memory 4g``, …).
    :param env: extra environment for ``spark-submit`` (``PYSPARK_PYTHON``, ``HADOOP_CONF_DIR``…).
    :param deploy_mode: ``"client"`` only: the driver reports the stage's result.
    """

    master: str
    staging_uri: str
    spark_submit_args: Sequence[str] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    deploy_mode: str = "client"

    def check(self) -> None:
        if not self.master:
            raise InvalidSpecError("spark_submit needs master, e.g. 'spark://host:7077' or 'yarn'")
        if self.deploy_mode != "client":
            raise InvalidSpecError(
                "spark_submit supports deploy_mode='client' (the driver reports its result)"
            )
        self._set(spark_submit_args=tuple(self.spark_submit_args), env=dict(self.env or {}))


class SparkSubmitEngine(StagedResults):
    """Run stages with ``spark-submit`` against any Spark master (options: :class:`SparkSubmitOptions`)."""

    name = "spark_submit"

    def __init__(self, clients: Any, options: SparkSubmitOptions | Mapping[str, Any]) -> None:
        self.options = SparkSubmitOptions.of(options)
        needs_s3 = self.options.staging_uri.startswith("s3")
        self.stager = Stager(self.options.staging_uri, clients("s3") if needs_s3 else None)

    def stage(self, spec: RunSpec) -> StagedRun:
        return self.stager.stage(spec)

    def command(self, staged: StagedRun) -> list[str]:
        return [
            spark_submit_path(),
            "--master",
            self.options.master,
            "--deploy-mode",
            "client",
            "--name",
            staged.spec.identity.job_name,
            *self.options.spark_submit_args,
            staged.script_uri,
            "--spec",
            staged.spec_uri,
            "--code",
            staged.code_uri,
        ]

    def _active_uri(self, identity: RunIdentity) -> str:
        return self.stager.uri("runs", identity.task_key, "active.json")

    def submit(self, staged: StagedRun) -> JobHandle:
        log_path = os.path.join(os.environ.get("DLTRAIN_HOME", ".dltrain"), "spark-submit")
        os.makedirs(log_path, exist_ok=True)
        log_file = os.path.join(log_path, f"{staged.spec.identity.job_name}.log")
        env = {
            **os.environ,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            **self.options.env,
        }
        env.pop("PYSPARK_GATEWAY_PORT", None)
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(
                self.command(staged), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        ids = {
            "pid": proc.pid,
            "host": socket.gethostname(),
            "log": log_file,
            "started": _start_time(proc.pid),
        }
        handle = JobHandle(self.name, ids, staged.result_uri)
        self.stager.put(self._active_uri(staged.spec.identity), json.dumps(handle.to_dict()).encode())
        return handle

    def find(self, identity: RunIdentity) -> JobHandle | None:
        raw = self.stager.get(self._active_uri(identity))
        if raw is None:
            return None
        handle = JobHandle.from_dict(json.loads(raw))
        if handle.ids.get("host") != socket.gethostname() or not _running(handle):
            return None
        return handle

    def poll(self, handle: JobHandle) -> JobStatus:
        result = self.stager.result(handle.result_uri)
        if result is not None and not _running(handle):
            if "error" in result:
                return JobStatus(FAILED, "FAILED", str(result["error"]))
            return JobStatus(SUCCEEDED, "SUCCEEDED")
        if _running(handle):
            return JobStatus(RUNNING, "RUNNING")
        return JobStatus(FAILED, "EXITED", f"spark-submit ended without a result; see {handle.ids['log']}")

    def cancel(self, handle: JobHandle) -> None:
        pid = int(handle.ids["pid"])
        if _running(handle):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                return

    def teardown(self, handle: JobHandle) -> None:
        """Nothing to remove: the cluster is the user's."""

    def log_location(self, handle: JobHandle) -> str:
        """The driver's log: the file ``spark-submit``'s output went to, on the machine that ran it."""
        return f"driver log {handle.ids['log']} on {handle.ids.get('host', 'this machine')}"
