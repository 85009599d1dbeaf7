"""A DAG scheduled on an AssetWatcher of a Delta table runs once per committed version, across a
triggerer restart: real api-server, dag-processor, scheduler and triggerer on 127.0.0.1.

The test waits on what the watcher records, never for a fixed time: its position (the last version
it recorded as fired) in the asset state store, read through the REST API."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_dltrain.triggers.delta import DeltaTableNewVersionTrigger
from tests.conftest import free_port
from tests.e2e.airflow_services import AirflowApi, airflow_services, wait_for_dag

DAG_ID, ASSET = "dltrain_on_new_version", "dltrain_watched_events"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _commit(table_uri: str, n: int) -> None:
    import pyarrow as pa

    from airflow_provider_dltrain.lake import overwrite_partition

    overwrite_partition(table_uri, pa.table({"x": pa.array([n], pa.int64())}), {"ds": f"2026-11-2{n}"})


def _maintain(table_uri: str) -> None:
    """A commit that changes no rows (SET TBLPROPERTIES): the watcher steps over it, firing nothing."""
    from deltalake import DeltaTable

    DeltaTable(table_uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})


def _start_triggerer(api: AirflowApi, log: Path) -> subprocess.Popen:
    out = open(log, "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "triggerer"],
        env=api.env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen, *, wait: bool = True) -> None:
    if proc.poll() is not None:  # ended and reaped: its id may belong to another process by now
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    if not wait:
        return
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _recorded(record: Path) -> list[int]:
    """The versions the DAG's runs were triggered for, in commit order (one file per run)."""
    files = sorted(record.glob("*.txt")) if record.exists() else []
    return sorted(int(v) for f in files for v in f.read_text().split())


def _wait_recorded(record: Path, count: int, logs: Path, timeout: float = 150) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_recorded(record)) >= count:
            return _recorded(record)
        time.sleep(0.2)
    tail = (logs / "triggerer.log").read_text()[-3000:] if (logs / "triggerer.log").exists() else ""
    raise TimeoutError(f"{count} versions not recorded within {timeout}s: {_recorded(record)}\n{tail}")


def _position(api: AirflowApi, asset_id: int, key: str) -> int | None:
    """The last version the watcher recorded as fired (or stepped over), from its asset state store."""
    entries = api.call("GET", f"/api/v2/assets/{asset_id}/state-store")["asset_state_store"]
    return next((int(e["value"]) for e in entries if e["key"] == key), None)


def _wait_position(api: AirflowApi, asset_id: int, key: str, version: int, logs: Path) -> None:
    """Wait until the watcher has recorded ``version`` (so it looked at the table since it recorded
    the versions before), failing if it records a later one."""
    deadline = time.monotonic() + 90
    while (position := _position(api, asset_id, key)) is None or position < version:
        if time.monotonic() > deadline:
            tail = (logs / "triggerer.log").read_text()[-3000:]
            raise TimeoutError(f"the watcher did not record version {version} within 90s: {position}\n{tail}")
        time.sleep(0.5)
    assert position == version


def _wait_runs_finished(api: AirflowApi, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        runs = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
        if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} finished runs expected within {timeout}s: {runs}")
        time.sleep(0.5)


def test_dag_on_asset_watcher_runs_once_per_committed_version_across_a_triggerer_restart(tmp_path):
    table, record, logs = tmp_path / "events", tmp_path / "record", tmp_path / "logs"
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(Path(__file__).parent / "watcher_dags"),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__OPENLINEAGE__DISABLED": "true",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",  # a loaded 2-core machine answers slowly
        "DLTRAIN_WATCHED_TABLE": str(table),
        "DLTRAIN_WATCHED_RECORD": str(record),
    }
    triggerers: list[subprocess.Popen] = []
    try:
        with airflow_services(tmp_path / "airflow", env, logs) as api:
            triggerers.append(_start_triggerer(api, logs / "triggerer.log"))
            key = DeltaTableNewVersionTrigger(table_uri=str(table)).state_key
            try:
                wait_for_dag(api, DAG_ID)
                (asset,) = [
                    a["id"]
                    for a in api.call("GET", f"/api/v2/assets?name_pattern={ASSET}")["assets"]
                    if a["name"] == ASSET
                ]
                _commit(str(table), 0)
                assert _wait_recorded(record, 1, logs) == [0]
                _commit(str(table), 1)
                assert _wait_recorded(record, 2, logs) == [0, 1]
                _wait_position(api, asset, key, 1, logs)  # past the grace: version 1 is recorded as fired

                _stop(triggerers[-1])
                _commit(str(table), 2)  # committed while no triggerer runs
                triggerers.append(_start_triggerer(api, logs / "triggerer.log"))
                assert _wait_recorded(record, 3, logs) == [0, 1, 2]
                # Version 3 changes no rows. Once the watcher has stepped over it, it has recorded
                # version 2 and looked at the table again: anything it fired before is in the metadata
                # database (the triggerer flushes an event within a loop, about a second; the watcher
                # records a position PERSIST_GRACE seconds after any event it fires).
                _maintain(str(table))
                _wait_position(api, asset, key, 3, logs)
                events = api.call("GET", f"/api/v2/assets/events?asset_id={asset}&limit=100")["asset_events"]
                queued = api.call("GET", f"/api/v2/dags/{DAG_ID}/assets/queuedEvents")["queued_events"]
                runs = _wait_runs_finished(api, 3)
            finally:
                _stop(triggerers[-1], wait=False)  # it shuts down while the services do
    finally:
        for triggerer in triggerers:
            _stop(triggerer)

    # one event per data version and each made one run: no event waits to become a fourth run
    assert sorted(e["extra"]["payload"]["version"] for e in events) == [0, 1, 2]
    assert queued == []
    assert _recorded(record) == [0, 1, 2]
    assert len(list(record.glob("*.txt"))) == len(runs) == 3
    assert sorted(r["state"] for r in runs) == ["success"] * 3
    assert "resuming after version 1" in (logs / "triggerer.log").read_text()
