"""A Spark standalone cluster on 127.0.0.1: one master and N workers started with pyspark's own ``spark-class``.

Every daemon runs in its own process group, so stopping the cluster also ends the executors and the
Python workers they forked. Logs go to files under the work directory and are quoted when the
cluster does not come up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_dltrain.utils.ports import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> str:
    """The pyspark package directory: it ships ``bin/spark-class`` and the jars."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclass(frozen=True)
class SparkCluster:
    """A running cluster: ``master_url`` for ``SparkSession.builder.master``, ``web_url`` for its JSON."""

    master_url: str
    web_url: str
    work_dir: Path

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.web_url}/json", timeout=5) as response:
            return dict(json.load(response))

    def alive_workers(self) -> list[dict]:
        return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]


def _environment(pythonpath: Sequence[str]) -> dict[str, str]:
    env = dict(os.environ)
    before = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(
        {
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(dict.fromkeys([*pythonpath, *before])),
            "SPARK_NO_DAEMONIZE": "1",
        }
    )
    return env


def _start(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            ["bash", spark_class, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killpg ends executors and Python workers too
        )


def _stop(processes: Sequence[subprocess.Popen], grace_s: float = 10.0) -> None:
    for proc in reversed(processes):  # workers first, then the master
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # children (executors) may outlive the daemon
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _tails(work_dir: Path) -> str:
    return "\n".join(
        f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(work_dir.glob("*.log"))
    )


def _wait_for_workers(
    cluster: SparkCluster, processes: Sequence[subprocess.Popen], count: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [p.args for p in processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark daemon exited early: {dead}\n{_tails(cluster.work_dir)}")
        with contextlib.suppress(OSError, ValueError):
            if len(cluster.alive_workers()) >= count:
                return
        time.sleep(0.3)
    raise TimeoutError(
        f"{count} Spark worker(s) did not register with {cluster.master_url} within {timeout_s}s\n"
        f"{_tails(cluster.work_dir)}"
    )


@contextlib.contextmanager
def spark_cluster(
    work_dir: Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    pythonpath: Sequence[str] = (),
    timeout_s: float = 90.0,
) -> Iterator[SparkCluster]:
    """Start a master and ``workers`` workers on 127.0.0.1; yield once all registered; stop them all.

    :param pythonpath: prepended to the workers' ``PYTHONPATH`` (their Python workers import from it).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    env = _environment(pythonpath)
    env["SPARK_LOCAL_DIRS"] = str(work_dir / "local")
    port, web_port = free_port(), free_port()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", work_dir)
    master = [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)]
    processes = [_start(master, env, work_dir / "master.log")]
    try:
        for i in range(workers):
            worker = [
                WORKER_CLASS,
                cluster.master_url,
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work_dir / f"worker-{i}"),
            ]
            processes.append(_start(worker, env, work_dir / f"worker-{i}.log"))
        _wait_for_workers(cluster, processes, workers, timeout_s)
        yield cluster
    finally:
        _stop(processes)
