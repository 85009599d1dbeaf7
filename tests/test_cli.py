"""The read-only commands never create an MLflow store, and say where they looked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _dltrain(*args, env, flags=()):
    return subprocess.run(
        [sys.executable, *flags, "-m", "airflow_provider_dltrain", *args],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.fixture
def bare_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AIRFLOW_CONN_"))}
    env["DLTRAIN_HOME"] = str(tmp_path / "home")
    return env


@pytest.fixture
def no_aws_env(bare_env, tmp_path):
    """No AWS setting anywhere: no AWS_* variables, no ~/.aws, no instance metadata to wait for."""
    env = {k: v for k, v in bare_env.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path / "user")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


@pytest.fixture
def s3_table(s3_bucket, tmp_path):
    """A Delta table on the moto server, and an MLflow store for the read-only commands to find."""
    import pyarrow as pa

    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.store.config import TrackingConfig

    bucket, options = s3_bucket
    uri = f"s3://{bucket}/lake/predictions"
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": "2026-11-28"}, storage_options=options)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    TrackingConfig(tracking_uri=store).client().search_registered_models()  # creates the store
    return uri, options, store


@pytest.mark.parametrize("how", ["aws-conn-id", "storage-option"])
def test_lineage_reads_an_s3_table_through_a_connection_or_storage_options_without_airflow(
    s3_table, no_aws_env, how
):
    import json

    uri, options, store = s3_table
    if how == "aws-conn-id":
        conn = {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"endpoint_url": options["AWS_ENDPOINT_URL"], "region_name": "us-east-1"},
        }
        no_aws_env["AIRFLOW_CONN_AWS_MOTO"] = json.dumps(conn)
        given = ["--aws-conn-id", "aws_moto"]
    else:
        given = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    proc = _dltrain(
        "lineage", uri, "--tracking-uri", store, *given, env=no_aws_env, flags=("-X", "importtime")
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"predictions {uri} version 0" in proc.stdout
    assert not _imported(proc.stderr, "airflow")  # no Airflow needed


def test_lineage_of_an_s3_table_without_settings_names_each_missing_one_and_how_to_pass_it(
    s3_table, no_aws_env
):
    uri, _, store = s3_table
    proc = _dltrain("lineage", uri, "--tracking-uri", store, env=no_aws_env)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: cannot read {uri}: ")
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert any(line.startswith("  missing credentials: pass --aws-conn-id") for line in lines), proc.stderr
    assert any(line.startswith("  missing region: pass --storage-option AWS_REGION=") for line in lines)
    assert any(line.startswith("  no endpoint: ") and "AWS_ENDPOINT_URL=" in line for line in lines)


@pytest.mark.parametrize("command", [("lineage", "s3://b/t"), ("champion", "m")])
def test_an_unknown_aws_connection_or_a_malformed_storage_option_is_named(command, no_aws_env):
    proc = _dltrain(*command, "--aws-conn-id", "nope", env=no_aws_env)
    assert (
        proc.returncode == 1 and "no Airflow connection 'nope': define it as AIRFLOW_CONN_NOPE" in proc.stderr
    )
    proc = _dltrain(*command, "--storage-option", "AWS_REGION", env=no_aws_env)
    assert proc.returncode == 1 and "--storage-option 'AWS_REGION': expected KEY=VALUE" in proc.stderr


@pytest.mark.parametrize(
    "args", [("lineage", "/nowhere/table"), ("champion", "dltrain_digits", "--as-of", "2026-11-25")]
)
def test_read_only_commands_refuse_a_store_that_does_not_exist_and_create_nothing(args, bare_env, tmp_path):
    proc = _dltrain(*args, env=bare_env)
    assert proc.returncode == 1
    assert f"no MLflow store at sqlite:///{tmp_path / 'home' / 'mlflow.db'}" in proc.stderr
    assert not (tmp_path / "home").exists()


def test_champion_command_names_a_model_that_is_not_registered(bare_env, tmp_path):
    from airflow_provider_dltrain.store.config import TrackingConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    TrackingConfig(tracking_uri=uri).client().search_registered_models()  # creates the store
    proc = _dltrain("champion", "nope", "--tracking-uri", uri, env=bare_env)
    assert proc.returncode == 1 and "no registered model 'nope'" in proc.stderr


def test_champion_command_prints_history_and_the_champion_for_a_date(bare_env, tmp_path):
    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote
    from airflow_provider_dltrain.store.config import TrackingConfig

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
    # found through $MLFLOW_TRACKING_URI, after looking for mlflow_default without importing Airflow
    found = {**bare_env, "MLFLOW_TRACKING_URI": uri}
    before = _dltrain("champion", "m", "--as-of", "2026-11-01", env=found, flags=("-X", "importtime"))
    assert "champion for 2026-11-01: none" in before.stdout
    assert not _imported(before.stderr, "airflow")


def _imported(importtime: str, package: str) -> set[str]:
    """The modules of ``package`` in a ``python -X importtime`` report."""
    names = {line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines() if "|" in line}
    return {n for n in names if n == package or n.startswith(f"{package}.")}


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


@pytest.mark.parametrize(
    "uri",
    [
        "aws://AKIA:se%2Fcret@/?region_name=eu-west-1&endpoint_url=http%3A%2F%2F127.0.0.1%3A5000",
        "aws://?__extra__=%7B%22region_name%22%3A+%22eu-west-1%22%7D",
        "mlflow://http://alice:pa%40ss@mlflow.internal:5000/?registry_uri=sqlite%3A%2F%2F%2Fr.db",
    ],
)
def test_connections_from_the_environment_read_as_airflow_reads_them(uri):
    from airflow.sdk.definitions.connection import Connection as AirflowConnection

    from airflow_provider_dltrain.commands.connections import parse_connection

    ours, theirs = parse_connection("c", uri), AirflowConnection.from_uri(uri, conn_id="c")
    for field in ("conn_type", "host", "login", "password", "port", "schema"):
        assert (getattr(ours, field) or None) == (getattr(theirs, field) or None), field
    assert ours.extra_dejson == theirs.extra_dejson
