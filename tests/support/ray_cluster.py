"""A Ray cluster on 127.0.0.1: a head node and more nodes started with Ray's own ``ray start``.

Each node gets one CPU, so a 2-worker ``STRICT_SPREAD`` training needs both nodes. Everything the
cluster runs is found by its session directory (every Ray daemon names it on its command line) and
by descent from those daemons (workers, agents, job drivers): stopping the cluster ends exactly
those processes, never another Ray on the machine (``ray stop`` would end every Ray of the user).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from airflow_provider_dltrain.utils.ports import free_port


@dataclass(frozen=True)
class RayCluster:
    """A running cluster: ``address`` is the dashboard (Jobs API), ``gcs`` what ``ray start --address`` joins."""

    address: str
    gcs: str
    temp_dir: Path

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: its daemons and all they started."""
        return cluster_processes(self.temp_dir)


def cluster_processes(temp_dir: Path) -> list[psutil.Process]:
    marker = str(temp_dir)
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in proc.info["cmdline"] or ()):
                roots.append(proc)
    found = {p.pid: p for p in roots}
    for proc in roots:
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
    return [p for p in found.values() if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ray(*args: str, env: dict[str, str], log: Path) -> None:
    ray = str(Path(sys.executable).with_name("ray"))
    with open(log, "ab") as out:
        done = subprocess.run(
            [ray, "start", *args], env=env, stdout=out, stderr=subprocess.STDOUT, timeout=120
        )
    if done.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{log.read_text()[-4000:]}")


@contextlib.contextmanager
def ray_cluster(nodes: int = 2) -> Iterator[RayCluster]:
    """``nodes`` one-CPU nodes (the first the head, with the dashboard); stopped and checked on exit."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # Ray's socket paths must stay short
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        # a loopback cluster of the test: no token authentication, whatever ~/.ray/auth_token holds
        # (a local ray.init() writes one there and later clusters would use it)
        "RAY_AUTH_MODE": "disabled",
        "RAY_DEDUP_LOGS": "0",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
    }
    gcs_port, dashboard_port = free_port(), free_port()
    gcs = f"127.0.0.1:{gcs_port}"
    log = temp_dir / "ray-start.log"
    common = ["--num-cpus=1", "--num-gpus=0", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    try:
        _ray(
            "--head",
            f"--port={gcs_port}",
            f"--temp-dir={temp_dir}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            *common,
            env=env,
            log=log,
        )
        for _ in range(nodes - 1):
            _ray(
                f"--address={gcs}",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--metrics-export-port={free_port()}",
                *common,
                env=env,
                log=log,
            )
        yield RayCluster(f"http://127.0.0.1:{dashboard_port}", gcs, temp_dir)
    finally:
        stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def stop(temp_dir: Path, grace_s: float = 3.0) -> None:
    """End every process of the cluster (SIGTERM, then SIGKILL) and fail if one is left."""
    procs = cluster_processes(temp_dir)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    left = [p for p in cluster_processes(temp_dir) if _alive(p)]
    assert not left, f"Ray processes left running: {[(p.pid, p.name()) for p in left]}"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and cluster_processes(temp_dir):
        time.sleep(0.2)
