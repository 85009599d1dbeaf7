"""The same registry flow against a real ``mlflow server`` on loopback (REST store, proxied artifacts).

The server runs in its own process group and is stopped at the end of the module, also on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from registry_helpers import make_train

from airflow_provider_dltrain.hooks.mlflow import MlflowHook
from airflow_provider_dltrain.registry import (
    GateSpec,
    champion_as_of,
    register_and_promote,
    resolve_model,
)
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.utils.ports import free_port

pytestmark = pytest.mark.slow


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"mlflow server not healthy within {timeout}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server's whole process group (uvicorn runs as a child of the CLI)."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def server_url(tmp_path_factory, _migrated_mlflow_db):
    root = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(_migrated_mlflow_db, root / "mlflow.db")
    port, log = free_port(), root / "server.log"
    # Job execution would start a pool of huey consumers: not needed, and heavy on 2 cores.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc, log)
        yield url
    finally:
        _stop(proc)


def test_the_test_button_succeeds_against_a_running_server(server_url, monkeypatch):
    conn = {"conn_type": "mlflow", "host": server_url, "password": "any-token-1234"}
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_SERVER", json.dumps(conn))
    ok, message = MlflowHook(mlflow_conn_id="mlflow_server").test_connection()
    assert ok, message
    assert server_url in message and "any-token-1234" not in message


def test_gate_history_and_idempotency_hold_over_the_rest_api(server_url):
    tracking = TrackingConfig(tracking_uri=server_url)
    train = make_train(tracking, None)  # artifacts go through the server's proxy
    gate = GateSpec(metric="val_loss", mode="min", min_delta=0.01)

    def promote(result):
        return register_and_promote(
            tracking,
            model_name="digits",
            model_uri=result["model_uri"],
            run_id=result["run_id"],
            metrics=result["metrics"],
            gate=gate,
            registration_key="nightly/manual",
        )

    first = promote(train("2026-11-01", {"val_loss": 0.50}))
    newer = train("2026-11-10", {"val_loss": 0.40})
    live = promote(newer)
    backfill = promote(train("2026-11-05", {"val_loss": 0.45}))
    rejected = promote(train("2026-11-12", {"val_loss": 0.395}))  # better, but by less than min_delta
    again = promote(newer)

    assert first.promoted and live.promoted and live.holds_alias
    assert backfill.promoted and not backfill.holds_alias
    assert not rejected.promoted and "< min_delta 0.01" in rejected.reason
    assert again.version == live.version and again.reason == live.reason
    client = tracking.client()
    assert len(client.search_model_versions("name = 'digits'")) == 4
    assert client.get_model_version_by_alias("digits", "champion").version == str(live.version)
    assert champion_as_of(tracking, "digits", "2026-11-07").version == backfill.version
    assert champion_as_of(tracking, "digits", "2026-11-30").version == live.version
    assert resolve_model(tracking, {"name": "digits"}, as_of="2026-11-02").version == first.version
    assert client.get_model_version("digits", str(live.version)).tags["dltrain.code_hash"] == "c0de"
