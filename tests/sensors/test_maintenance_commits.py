"""Maintenance commits (VACUUM START/END, OPTIMIZE, table properties) are not new versions.

The sensor's poke, both triggers' loops and the hook method they share count only commits that
changed data; the version handed on is the newest data change, which reads the same rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.maintenance import vacuum
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from airflow_provider_dltrain.triggers import DeltaTableNewVersionTrigger, DeltaTableVersionTrigger
from airflow_provider_dltrain.triggers import delta as delta_triggers


class _Store:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.data[key] = value


@pytest.fixture(autouse=True)
def _no_persist_grace(monkeypatch):
    monkeypatch.setattr(delta_triggers, "PERSIST_GRACE", 0.0)


def _vacuumed(table_uri: str) -> int:
    """Run ``dltrain vacuum`` with no retention; returns the newest version (its VACUUM END)."""
    result = vacuum(table_uri, retention_hours=0, force=True)
    assert result.files, "nothing to vacuum: the test table needs a replaced file"
    newest = DeltaLog(table_uri).latest_version()
    assert newest is not None
    operations = [DeltaLog(table_uri).commit_info(v)["operation"] for v in (newest - 1, newest)]
    assert operations == ["VACUUM START", "VACUUM END"]
    return newest


def _table_with_a_replaced_file(table_uri: str, write_version) -> Any:
    write_version(table_uri, "2026-11-27")
    return write_version(table_uri, "2026-11-27")  # replaces the file vacuum then deletes


def _events_within(trigger: Any, seconds: float, count: int = 1) -> list[dict[str, Any]]:
    """The payloads of up to ``count`` events the trigger yields within ``seconds`` each."""

    async def collect() -> list[dict[str, Any]]:
        gen = trigger.run()
        payloads: list[dict[str, Any]] = []
        try:
            with contextlib.suppress(TimeoutError):
                for _ in range(count):
                    payloads.append((await asyncio.wait_for(anext(gen), seconds)).payload)
            return payloads
        finally:
            await gen.aclose()

    return asyncio.run(collect())


def _watcher(table_uri: str, store: _Store, **kwargs: Any) -> DeltaTableNewVersionTrigger:
    trigger = DeltaTableNewVersionTrigger(table_uri=table_uri, aws_conn_id=None, poll_interval=0.05, **kwargs)
    trigger.asset_state_store = store
    return trigger


def _sensor(**kwargs: Any) -> DeltaTableVersionSensor:
    return DeltaTableVersionSensor(
        task_id="wait_for_events", aws_conn_id=None, poll_interval=0.05, timeout=30, **kwargs
    )


def test_vacuum_of_a_watched_table_fires_no_new_version_event(table_uri, write_version):
    _table_with_a_replaced_file(table_uri, write_version)
    store = _Store()
    assert _events_within(_watcher(table_uri, store), 0.3) == []  # first look: watching after v1

    _vacuumed(table_uri)

    assert _events_within(_watcher(table_uri, store), 0.5) == []
    added = write_version(table_uri, "2026-11-28")
    assert [p["version"] for p in _events_within(_watcher(table_uri, store), 20)] == [added.version]


def test_watcher_from_version_zero_fires_only_for_the_data_changes(table_uri, write_version):
    first = write_version(table_uri, "2026-11-27")
    second = write_version(table_uri, "2026-11-27")
    _vacuumed(table_uri)
    third = write_version(table_uri, "2026-11-28")

    payloads = _events_within(_watcher(table_uri, _Store(), from_version=0), 20, count=3)

    assert [p["version"] for p in payloads] == [first.version, second.version, third.version]


def test_version_trigger_does_not_fire_on_a_vacuum_commit(table_uri, write_version):
    last = _table_with_a_replaced_file(table_uri, write_version)
    _vacuumed(table_uri)
    trigger = DeltaTableVersionTrigger(
        table_uri=table_uri, newer_than=last.to_dict(), aws_conn_id=None, poll_interval=0.05
    )

    assert _events_within(trigger, 0.5) == []


def test_version_trigger_fires_with_the_data_version_not_the_vacuum_after_it(table_uri, write_version):
    last = _table_with_a_replaced_file(table_uri, write_version)
    _vacuumed(table_uri)
    trigger = DeltaTableVersionTrigger(
        table_uri=table_uri, min_version=1, aws_conn_id=None, poll_interval=0.05
    )

    assert _events_within(trigger, 20) == [{"status": "success", "ref": last.to_dict()}]


@pytest.mark.parametrize("condition", ["newer_than", "min_version"])
def test_sensor_does_not_succeed_on_a_vacuum_commit(condition, table_uri, write_version):
    last = _table_with_a_replaced_file(table_uri, write_version)
    kwargs = {"newer_than": last} if condition == "newer_than" else {"min_version": last.version + 1}
    task = _sensor(table_uri=table_uri, **kwargs)

    _vacuumed(table_uri)

    assert task.poke({}) is False
    added = write_version(table_uri, "2026-11-28")
    result = task.poke({})
    assert result.is_done and result.xcom_value == added.to_dict()


def test_sensor_hands_on_the_newest_data_version_not_the_vacuum_after_it(table_uri, write_version):
    last = _table_with_a_replaced_file(table_uri, write_version)
    _vacuumed(table_uri)

    assert _sensor(table_uri=table_uri, partition={"ds": "2026-11-27"}).execute({}) == last.to_dict()


def test_cutoff_pin_is_unchanged_by_a_vacuum(table_uri, write_version):
    for ds in ("2026-11-01", "2026-11-02", "2026-11-03"):
        write_version(table_uri, ds)
    restated = write_version(table_uri, "2026-11-02")  # replaces a file for vacuum to delete
    write_version(table_uri, "2026-11-04")
    task = _sensor(table_uri=table_uri, partition={"ds": "2026-11-03"}, pin="cutoff")
    before = task.execute({})

    _vacuumed(table_uri)

    assert task.execute({}) == before == restated.to_dict()


def test_commits_that_only_maintain_the_table_do_not_change_data(table_uri, write_version):
    from deltalake import DeltaTable

    _table_with_a_replaced_file(table_uri, write_version)
    write_version(table_uri, "2026-11-28")
    DeltaTable(table_uri).optimize.z_order(["x"])  # rewrites a file: dataChange=false
    DeltaTable(table_uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})
    _vacuumed(table_uri)
    DeltaTable(table_uri).delete("ds = '2026-11-28'")
    log = DeltaLog(table_uri)
    latest = log.latest_version()
    assert latest is not None

    verdicts = {log.commit_info(v)["operation"]: log.changes_data(v) for v in range(latest + 1)}

    assert verdicts == {
        "WRITE": True,
        "OPTIMIZE": False,
        "SET TBLPROPERTIES": False,
        "VACUUM START": False,
        "VACUUM END": False,
        "DELETE": True,
    }


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([{"commitInfo": {"operation": "SOMETHING NEW"}}], True),
        ([{"commitInfo": {"operation": "OPTIMIZE"}}, {"remove": {"path": "a", "dataChange": True}}], True),
        ([{"commitInfo": {"operation": "MERGE"}}, {"add": {"path": "a", "dataChange": False}}], False),
        (
            [
                {"commitInfo": {"operation": "X"}},
                {"add": {"path": "a", "dataChange": False}},
                {"metaData": {}},
            ],
            True,
        ),
        ([{"add": {"path": "a"}}], True),
        ([{"commitInfo": {"operation": "vacuum end"}}], False),
    ],
    ids=[
        "unknown-op",
        "maintenance-op-with-data-files",
        "rearranged-only",
        "schema-change",
        "no-flag",
        "case",
    ],
)
def test_an_unknown_commit_counts_as_a_data_change_unless_clearly_maintenance(actions, expected):
    from airflow_provider_dltrain.lake.log import changes_data

    assert changes_data(actions) is expected
