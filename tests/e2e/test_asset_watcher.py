"""A DAG scheduled on an AssetWatcher of a Delta table runs once per committed version, across a
triggerer restart: real api-server, dag-processor, scheduler and triggerer on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_dltrain.triggers.delta import PERSIST_GRACE
from tests.conftest import free_port
from tests.e2e.airflow_services import AirflowApi, airflow_services, wait_for_dag

DAG_ID = "dltrain_on_new_version"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _commit(table_uri: str, n: int) -> None:
    import pyarrow as pa

    from airflow_provider_dltrain.lake import overwrite_partition

    overwrite_partition(table_uri, pa.table({"x": pa.array([n], pa.int64())}), {"ds": f"2026-11-2{n}"})


def _start_triggerer(api: AirflowApi, log: Path) -> subprocess.Popen:
    out = open(log, "a")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "triggerer"],
        env=api.env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
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
        time.sleep(1)
    tail = (logs / "triggerer.log").read_text()[-3000:] if (logs / "triggerer.log").exists() else ""
    raise TimeoutError(f"{count} versions not recorded within {timeout}s: {_recorded(record)}\n{tail}")


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
    with airflow_services(tmp_path / "airflow", env, logs) as api:
        triggerer = _start_triggerer(api, logs / "triggerer.log")
        try:
            wait_for_dag(api, DAG_ID)
            _commit(str(table), 0)
            assert _wait_recorded(record, 1, logs) == [0]
            _commit(str(table), 1)
            assert _wait_recorded(record, 2, logs) == [0, 1]
            time.sleep(PERSIST_GRACE + 1)  # past the grace: version 1 is recorded as fired

            _stop(triggerer)
            _commit(str(table), 2)  # committed while no triggerer runs
            triggerer = _start_triggerer(api, logs / "triggerer.log")
            assert _wait_recorded(record, 3, logs) == [0, 1, 2]
            time.sleep(3 * 2.0 + 2)  # a few more looks at the table: nothing fires again
        finally:
            _stop(triggerer)
        runs = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]

    assert _recorded(record) == [0, 1, 2]
    assert len(list(record.glob("*.txt"))) == len(runs) == 3
    assert sorted(r["state"] for r in runs) == ["success"] * 3
    assert "resuming after version 1" in (logs / "triggerer.log").read_text()
