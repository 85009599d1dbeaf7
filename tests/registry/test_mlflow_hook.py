"""The ``mlflow`` connection type: connection -> TrackingConfig, fallback, UI test button, no leaks."""

from __future__ import annotations

import json
import logging
import time

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.hooks.mlflow import MlflowHook
from airflow_provider_dltrain.store.config import TrackingConfig

SECRET = "s3cr3t-pa55word"
TOKEN = "tok-0123456789abcdef"


def set_conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "mlflow", **fields}))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_hook_declares_the_connection_type_the_provider_registers():
    from airflow_provider_dltrain.provider_info import PROVIDER_INFO

    declared = PROVIDER_INFO["connection-types"][0]
    assert declared["hook-class-name"] == f"{MlflowHook.__module__}.{MlflowHook.__qualname__}"
    assert (MlflowHook.conn_type, MlflowHook.conn_name_attr) == ("mlflow", "mlflow_conn_id")
    assert (MlflowHook.default_conn_name, MlflowHook.hook_name) == ("mlflow_default", "MLflow")


def test_a_full_uri_in_host_is_the_tracking_uri_and_the_registry_uri_comes_from_extra(monkeypatch):
    set_conn(
        monkeypatch, "mlf", host="sqlite:////data/mlflow.db", extra={"registry_uri": "sqlite:////data/reg.db"}
    )
    config = MlflowHook(mlflow_conn_id="mlf").get_tracking_config()
    assert config.tracking_uri == "sqlite:////data/mlflow.db"
    assert config.registry_uri == "sqlite:////data/reg.db"
    assert config.env == {}


def test_a_bare_host_and_port_become_an_http_uri_with_basic_auth(monkeypatch):
    set_conn(monkeypatch, "mlf", host="mlflow.internal", port=5000, login="svc", password=SECRET)
    config = MlflowHook(mlflow_conn_id="mlf").get_tracking_config()
    assert config.tracking_uri == "http://mlflow.internal:5000"
    assert config.env == {"MLFLOW_TRACKING_USERNAME": "svc", "MLFLOW_TRACKING_PASSWORD": SECRET}


def test_a_password_without_login_is_a_bearer_token_and_insecure_tls_is_honoured(monkeypatch):
    set_conn(
        monkeypatch, "mlf", host="https://mlflow.example.com", password=TOKEN, extra={"insecure_tls": True}
    )
    config = MlflowHook(mlflow_conn_id="mlf").get_tracking_config()
    assert config.env == {"MLFLOW_TRACKING_TOKEN": TOKEN, "MLFLOW_TRACKING_INSECURE_TLS": "true"}


def test_a_connection_without_host_is_rejected_with_what_to_set(monkeypatch):
    set_conn(monkeypatch, "mlf", login="svc")
    with pytest.raises(InvalidSpecError, match="no Tracking URI"):
        MlflowHook(mlflow_conn_id="mlf").get_tracking_config()


def test_a_missing_connection_falls_back_to_the_embedded_store_with_an_info_line(
    monkeypatch, tmp_path, caplog, capsys
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    with caplog.at_level(logging.INFO):
        config = MlflowHook().get_tracking_config()
    assert config.tracking_uri == f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"
    logged = caplog.text + capsys.readouterr().out  # Airflow's structlog writes to stdout
    assert "'mlflow_default' is not defined; using the embedded MLflow store" in logged


def test_a_named_connection_that_does_not_exist_is_an_error_not_a_silent_local_store(monkeypatch):
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    with pytest.raises(InvalidSpecError, match="'mlflow_prod' is not defined"):
        MlflowHook(mlflow_conn_id="mlflow_prod").get_tracking_config()


def test_the_test_button_succeeds_on_a_good_store(monkeypatch, mlflow_uri):
    set_conn(monkeypatch, "mlf", host=mlflow_uri)
    ok, message = MlflowHook(mlflow_conn_id="mlf").test_connection()
    assert ok, message
    assert "Connected to MLflow" in message


def test_the_test_button_fails_fast_on_an_unreachable_server_without_leaking_secrets(
    monkeypatch, caplog, capsys
):
    set_conn(monkeypatch, "mlf", host=f"http://127.0.0.1:{free_port()}", login="svc", password=SECRET)
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        ok, message = MlflowHook(mlflow_conn_id="mlf").test_connection()
    assert not ok and "Cannot use MLflow at http://127.0.0.1:" in message
    assert time.monotonic() - started < 30  # no minutes of retries with back-off
    logged = caplog.text + "".join(capsys.readouterr())
    assert SECRET not in message and SECRET not in logged


def test_the_test_button_leaves_no_credentials_in_the_process_environment(monkeypatch, mlflow_uri):
    import os

    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    set_conn(monkeypatch, "mlf", host=mlflow_uri, password=TOKEN)
    MlflowHook(mlflow_conn_id="mlf").test_connection()
    assert "MLFLOW_TRACKING_TOKEN" not in os.environ


def test_secrets_never_appear_in_repr_or_logs(monkeypatch, caplog, capsys):
    set_conn(monkeypatch, "mlf", host="http://user:inline-pw-123@mlflow:5000", login="svc", password=SECRET)
    hook = MlflowHook(mlflow_conn_id="mlf")
    with caplog.at_level(logging.DEBUG):
        config = hook.get_tracking_config()
    text = repr(hook) + repr(config) + str(config) + caplog.text + "".join(capsys.readouterr())
    assert SECRET in config.env.values()
    assert SECRET not in text and "inline-pw-123" not in text
    assert repr(TrackingConfig(tracking_uri="postgresql://u:pw-xyz@db/mlflow")).count("pw-xyz") == 0
