"""A Ray cluster on 127.0.0.1 for offline tests and notebooks, stopped without leaving a process.

Each node is started with Ray's own ``ray start`` (one CPU each by default), in a session of its own,
with ``DLTRAIN_RAY_CLUSTER=<temp dir>`` in its environment. A process belongs to the cluster when it is
in the process group of one of those ``ray start`` calls, names the cluster's temp dir on its command
line, carries the marker in its environment, or descends from such a process. That covers the
daemons Ray re-parents to init once ``ray start`` returns, Ray's ``ray.util.client.server`` proxy
among them (which names no temp dir), the workers and the job drivers. ``stop`` ends exactly those
processes (``ray stop`` would end every Ray of the user) and fails naming any that is left.

The cluster runs with Ray's token authentication (``RAY_AUTH_MODE=token``, Ray 2.52 or later): its
Jobs API runs code, and a port on 127.0.0.1 is open to every user of the machine. A fresh token is
written at each start to ``<temp dir>/auth_token`` (mode 0600, in a directory only its user reads),
and every node reads it from there (``RAY_AUTH_TOKEN_PATH``). ``cluster.env`` (also written to
``cluster.env_file``, 0600) holds what a Jobs API client needs: the address, the mode and the
token's path; a process without the file is refused with 401.

Give the nodes the fake AWS's variables (``env=fake_aws.env``, or the file ``dltrain fake-aws
--env-file`` writes, read with :func:`read_env_file`) and the Ray workers reach the fake's S3.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from airflow_provider_dltrain.testing.fake_aws_keys import read_env_file, write_private
from airflow_provider_dltrain.utils.ports import free_port

MARK = "DLTRAIN_RAY_CLUSTER"
TOKEN_FILE, ENV_FILE = "auth_token", "ray.env"
__all__ = ["LocalRayCluster", "local_ray_cluster", "read_env_file", "stop"]


@dataclass(frozen=True)
class LocalRayCluster:
    """A running cluster: ``address`` is the dashboard (the Jobs API, ``backend_options["address"]``),
    ``gcs`` what ``ray start --address`` joins."""

    address: str
    gcs: str
    temp_dir: Path
    process_groups: tuple[int, ...]

    @property
    def token_file(self) -> Path:
        """The cluster's authentication token (mode 0600)."""
        return self.temp_dir / TOKEN_FILE

    @property
    def env_file(self) -> Path:
        """``export`` lines of :attr:`env` (mode 0600), to source in a shell that runs ``ray job``."""
        return self.temp_dir / ENV_FILE

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: its daemons and all they started."""
        return cluster_processes(self.temp_dir, self.process_groups)

    @property
    def env(self) -> dict[str, str]:
        """What a Jobs API client of this cluster needs (``ray job submit`` reads ``RAY_ADDRESS``): the
        address, token authentication and the token's file."""
        return {"RAY_ADDRESS": self.address, **auth_env(self.token_file)}


def auth_env(token_file: Path) -> dict[str, str]:
    """Ray's variables for token authentication with the token in ``token_file`` (Ray >= 2.52)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}


def cluster_processes(temp_dir: Path, process_groups: tuple[int, ...] = ()) -> list[psutil.Process]:
    """Live processes of the cluster whose temp dir is ``temp_dir`` (see the module docstring)."""
    marker, me = str(temp_dir), os.getpid()
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid != me and _belongs(proc, marker, process_groups):
            roots.append(proc)
    found = {p.pid: p for p in roots}
    for proc in roots:
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
    return [p for p in found.values() if _alive(p)]


def _belongs(proc: psutil.Process, marker: str, process_groups: tuple[int, ...]) -> bool:
    with contextlib.suppress(psutil.Error, OSError):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            return True
        if process_groups and os.getpgid(proc.pid) in process_groups:
            return True
        return proc.environ().get(MARK) == marker
    return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ray_start(args: list[str], env: dict[str, str], log: Path) -> int:
    """Run ``ray start`` in a new session; its process group id (the daemons it leaves keep it)."""
    ray = str(Path(sys.executable).with_name("ray"))
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [ray, "start", *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    if code != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{log.read_text()[-4000:]}")
    return proc.pid


@contextlib.contextmanager
def local_ray_cluster(
    nodes: int = 2, *, env: Mapping[str, str] | None = None, num_cpus: int = 1
) -> Iterator[LocalRayCluster]:
    """``nodes`` nodes of ``num_cpus`` CPUs on 127.0.0.1 (the first the head, with the dashboard), their
    processes given ``env`` on top of this one's; stopped and checked (:func:`stop`) when the block ends.
    """
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # Ray's socket paths must stay short
    token_file = temp_dir / TOKEN_FILE
    write_private(token_file, secrets.token_hex(32))  # a fresh one: never ~/.ray/auth_token
    full_env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"},  # it would win over the file
        **(env or {}),
        MARK: str(temp_dir),
        "RAY_USAGE_STATS_ENABLED": "0",
        **auth_env(token_file),
        "RAY_DEDUP_LOGS": "0",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
    }
    gcs_port, dashboard_port = free_port(), free_port()
    gcs, log = f"127.0.0.1:{gcs_port}", temp_dir / "ray-start.log"
    common = [
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        "--node-ip-address=127.0.0.1",
        "--disable-usage-stats",
    ]
    head = ["--head", f"--port={gcs_port}", f"--temp-dir={temp_dir}", "--include-dashboard=true"]
    head += ["--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    head += [f"--ray-client-server-port={free_port()}"]
    groups: list[int] = []
    cluster = LocalRayCluster(f"http://127.0.0.1:{dashboard_port}", gcs, temp_dir, ())
    try:
        for node in range(nodes):
            ports = [f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"]
            args = head if node == 0 else [f"--address={gcs}"]
            groups.append(_ray_start([*args, *ports, *common], full_env, log))
        cluster = LocalRayCluster(cluster.address, gcs, temp_dir, tuple(groups))
        lines = [f"export {name}={shlex.quote(value)}" for name, value in cluster.env.items()]
        write_private(cluster.env_file, "\n".join(lines) + "\n")
        yield cluster
    finally:
        try:
            stop(LocalRayCluster(cluster.address, gcs, temp_dir, tuple(groups)))
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)


def stop(cluster: LocalRayCluster, grace_s: float = 3.0) -> None:
    """End every process of the cluster (SIGTERM, then SIGKILL); AssertionError naming any left."""
    procs = cluster.processes()
    for pgid in cluster.process_groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for pgid in cluster.process_groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for proc in alive + cluster.processes():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + 5
    left = cluster.processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = cluster.processes()
    if left:
        raise AssertionError(f"Ray processes left running: {[(p.pid, _name(p)) for p in left]}")


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()[:3]) or proc.name()
    except psutil.Error:
        return "?"
