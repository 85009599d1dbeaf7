"""The read-only commands never create an MLflow store, and say where they looked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _dltrain(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", *args], capture_output=True, text=True, env=env
    )


@pytest.fixture
def bare_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AIRFLOW_CONN_"))}
    env["DLTRAIN_HOME"] = str(tmp_path / "home")
    return env


@pytest.mark.parametrize(
    "args", [("lineage", "/nowhere/table"), ("champion", "dltrain_digits", "--as-of", "2026-11-25")]
)
def test_read_only_commands_refuse_a_store_that_does_not_exist_and_create_nothing(args, bare_env, tmp_path):
    proc = _dltrain(*args, env=bare_env)
    assert proc.returncode == 1
    assert f"no MLflow store at sqlite:///{tmp_path / 'home' / 'mlflow.db'}" in proc.stderr
    assert not (tmp_path / "home").exists()


def test_champion_command_names_a_model_that_is_not_registered(bare_env, tmp_path):
    from airflow_provider_dltrain.registry.config import TrackingConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    TrackingConfig(tracking_uri=uri).client().search_registered_models()  # creates the store
    proc = _dltrain("champion", "nope", "--tracking-uri", uri, env=bare_env)
    assert proc.returncode == 1 and "no registered model 'nope'" in proc.stderr


def test_champion_command_prints_history_and_the_champion_for_a_date(bare_env, tmp_path):

    from airflow_provider_dltrain.registry.config import TrackingConfig
    from airflow_provider_dltrain.registry.models import history_tags

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = TrackingConfig(tracking_uri=uri).client()
    client.create_registered_model("m")
    from_tag, at_tag = history_tags("champion")
    for version, cutoff in ((1, "2026-11-24"), (2, "2026-11-26")):
        client.create_model_version("m", f"file:///tmp/m{version}")
        for key, value in {
            from_tag: cutoff,
            at_tag: str(1_700_000_000_000 + version),
            "dltrain.gate.decision": "promoted",
            "dltrain.gate.rule": "val_accuracy max min_delta=0",
            "dltrain.gate.candidate_value": "0.9",
            "dltrain.gate.basis": "rescored",
        }.items():
            client.set_model_version_tag("m", str(version), key, value)
    client.set_registered_model_alias("m", "champion", "2")

    out = _dltrain("champion", "m", "--as-of", "2026-11-25", "--tracking-uri", uri, env=bare_env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("  from 2026-11-24  v1") for line in lines)
    assert any(line.startswith("  from 2026-11-26  v2") for line in lines)
    assert "live alias 'champion': v2" in out.stdout
    assert "champion for 2026-11-25: v1" in out.stdout
    before = _dltrain("champion", "m", "--as-of", "2026-11-01", "--tracking-uri", uri, env=bare_env)
    assert "champion for 2026-11-01: none" in before.stdout
