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
    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote
    from airflow_provider_dltrain.registry.config import TrackingConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking = TrackingConfig(tracking_uri=uri)
    client = tracking.client()
    client.create_registered_model("m")
    gate = GateSpec(metric="val_accuracy", mode="max")
    for version, cutoff, value in ((1, "2026-11-24", "0.9"), (2, "2026-11-26", "0.95")):
        client.create_model_version(
            "m", f"file:///tmp/m{version}", tags={"dltrain.metric.val_accuracy": value}
        )
        assert gate_and_promote(
            tracking, model_name="m", version=version, gate=gate, data_cutoff=cutoff
        ).promoted

    out = _dltrain("champion", "m", "--as-of", "2026-11-25", "--tracking-uri", uri, env=bare_env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("  from 2026-11-24  v1") for line in lines), out.stdout
    assert any(line.startswith("  from 2026-11-26  v2") and "vs v1 0.9" in line for line in lines), out.stdout
    assert "live alias 'champion': v2" in out.stdout
    assert "champion for 2026-11-25: v1" in out.stdout
    before = _dltrain("champion", "m", "--as-of", "2026-11-01", "--tracking-uri", uri, env=bare_env)
    assert "champion for 2026-11-01: none" in before.stdout


def test_vacuum_command_removes_files_of_killed_writes_and_keeps_referenced_ones(bare_env, tmp_path):
    import time

    import pyarrow as pa

    from airflow_provider_dltrain import lake

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": "2026-11-28"})
    live = {os.path.basename(u) for u in lake.active_files(uri, 0)}
    folder = tmp_path / "t" / "ds=2026-11-28"
    then = time.time() - 9 * 24 * 3600
    for name in ("part-killed.snappy.parquet", "part-cut.parquet#1"):
        (folder / name).write_bytes(b"PAR1 half")
        os.utime(folder / name, (then, then))

    dry = _dltrain("vacuum", uri, "--dry-run", env=bare_env)
    assert dry.returncode == 0, dry.stderr
    assert "ds=2026-11-28/part-cut.parquet#1" in dry.stdout and "would remove 2" in dry.stdout
    assert len(os.listdir(folder)) == 3

    refused = _dltrain("vacuum", uri, "--retention-hours", "1", env=bare_env)
    assert refused.returncode == 1 and "--force" in refused.stderr

    done = _dltrain("vacuum", uri, env=bare_env)
    assert done.returncode == 0, done.stderr
    assert "removed 2 unreferenced file(s)" in done.stdout
    assert set(os.listdir(folder)) == live
    assert sorted(lake.open_table(uri).to_pyarrow_table().column("x").to_pylist()) == [1, 2]
