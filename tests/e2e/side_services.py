"""The services around Airflow in an end-to-end test: an ``mlflow server`` (the fake AWS is the package's,
``airflow_provider_dltrain.testing.fake_aws_process.start_fake_aws``).

Each runs in its own process group on 127.0.0.1 and is stopped at the end, also when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.conftest import free_port


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def mlflow_server(root: Path, log_path: Path, timeout: float = 180) -> Iterator[str]:
    """The URL of an ``mlflow server`` on SQLite with proxied artifacts under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # job execution would start a pool of huey consumers: not needed, and heavy on 2 cores
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _healthy(f"{url}/health"), proc, log_path, timeout)
        yield url
    finally:
        _stop(proc)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _wait(ready: Callable[[], bool], proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args[:4]} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        if ready():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{proc.args[:4]} not ready within {timeout}s:\n{log_path.read_text()[-3000:]}")
