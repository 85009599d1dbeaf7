"""MLflow credentials from an ``mlflow`` connection reach the server on every call, and never stay in
``os.environ`` (where every child process would inherit them).

A real ``mlflow server`` on loopback sits behind a small reverse proxy that demands HTTP basic auth,
so a call made without the connection's login/password is refused (401) rather than silently working.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import urllib.error
import urllib.request

import pytest
from test_registry_mlflow_server import server_url  # noqa: F401 - the module's real-server fixture

from airflow_provider_dltrain.hooks.mlflow import MlflowHook
from airflow_provider_dltrain.registry import GateSpec, register_and_promote
from airflow_provider_dltrain.training import run_training
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS

pytestmark = pytest.mark.slow

LOGIN, PASSWORD = "alice", "pw-Scoped-5f3e9c71"
_HOP = {"host", "authorization", "content-length", "connection", "transfer-encoding", "keep-alive"}


class _BasicAuthProxy(http.server.BaseHTTPRequestHandler):
    """Forwards a request to the MLflow server only when it carries the expected basic-auth header."""

    def log_message(self, *args):  # quiet
        pass

    def _forward(self) -> None:
        server = self.server
        authorized = self.headers.get("Authorization") == server.expected  # type: ignore[attr-defined]
        server.seen.append(authorized)  # type: ignore[attr-defined]
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(server.upstream + self.path, data=body, method=self.command)  # type: ignore[attr-defined]
        for key, value in self.headers.items():
            if key.lower() not in _HOP:
                request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, headers, data = response.status, response.headers, response.read()
        except urllib.error.HTTPError as err:
            status, headers, data = err.code, err.headers, err.read()
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in _HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


@pytest.fixture(scope="module")
def auth_url(server_url):  # noqa: F811
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BasicAuthProxy)
    proxy.upstream = server_url  # type: ignore[attr-defined]
    proxy.expected = "Basic " + base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()).decode()  # type: ignore[attr-defined]
    proxy.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", proxy.seen  # type: ignore[attr-defined]
    finally:
        proxy.shutdown()
        proxy.server_close()


def _no_credentials_in_environ() -> None:
    assert not [key for key in CREDENTIAL_KEYS if key in os.environ]
    # the test defines the connection itself through AIRFLOW_CONN_MLFLOW_AUTH; nothing else may hold it
    assert not [k for k, v in os.environ.items() if PASSWORD in v and k != "AIRFLOW_CONN_MLFLOW_AUTH"]


def _tiny_train(ctx):
    import torch

    _no_credentials_in_environ()  # not even while training runs, between MLflow calls
    model = torch.nn.Linear(64, 10)
    for batch in ctx.dataloader(32, columns=["features", "label"]):
        loss = torch.nn.functional.cross_entropy(model(batch["features"]), batch["label"])
        loss.backward()
    ctx.save_model(model)
    return {"val_loss": float(loss.item())}


def _tiny_table(path) -> object:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_dltrain import lake

    rng = np.random.default_rng(0)
    features = rng.random((48, 64), dtype=np.float32)
    table = pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                pa.list_(pa.float32())
            ),
            "label": pa.array(rng.integers(0, 10, 48).astype("int64")),
        }
    )
    return lake.overwrite_partition(str(path), table, {"ds": "2026-11-28"})


def test_training_and_registration_send_the_connection_credentials_and_leave_none_in_environ(
    auth_url, tmp_path, monkeypatch
):
    url, seen = auth_url
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException):  # the proxy really refuses a call without credentials
        MlflowClient(tracking_uri=url).search_experiments()
    conn = {"conn_type": "mlflow", "host": url, "login": LOGIN, "password": PASSWORD}
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_AUTH", json.dumps(conn))
    for key in CREDENTIAL_KEYS:
        monkeypatch.delenv(key, raising=False)
    seen.clear()

    tracking = MlflowHook(mlflow_conn_id="mlflow_auth").get_tracking_config()
    result = run_training(_tiny_train, _tiny_table(tmp_path / "t"), {"seed": 1}, tracking=tracking)
    _no_credentials_in_environ()
    outcome = register_and_promote(
        tracking,
        model_name="scoped",
        model_uri=str(result.model_uri),
        run_id=result.run_id,
        metrics=result.metrics,
        gate=GateSpec(metric="val_loss", mode="min"),
        data_cutoff="2026-11-28",
    )
    _no_credentials_in_environ()

    assert outcome.promoted and seen and all(seen)  # every call carried the login/password
    assert tracking.client().get_run(result.run_id).info.status == "FINISHED"
    assert PASSWORD not in repr(tracking) and PASSWORD not in repr(tracking.client())
