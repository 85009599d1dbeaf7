"""DeltaTableNewVersionTrigger: one event per committed version, resuming from the asset state store."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.triggers import DeltaTableNewVersionTrigger
from airflow_provider_dltrain.triggers import delta as delta_triggers


class FakeStateStore:
    """The asset state store's async accessors over a dict (the triggerer injects the real one)."""

    def __init__(self, data: dict[str, Any] | None = None, *, shared: bool = False) -> None:
        self.data = dict(data or {})
        self.shared = shared

    async def aget(self, key: str, default: Any = None) -> Any:
        if self.shared:
            raise ValueError("Task has 2 concrete inlets and outlets")
        return self.data.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        if self.shared:
            raise ValueError("Task has 2 concrete inlets and outlets")
        self.data[key] = value


@pytest.fixture(autouse=True)
def _no_persist_grace(monkeypatch):
    monkeypatch.setattr(delta_triggers, "PERSIST_GRACE", 0.0)


def _events(
    trigger: DeltaTableNewVersionTrigger, count: int, timeout: float = 20.0, settle: float = 0.0
) -> list[dict]:
    """The payloads of the first ``count`` events; after ``settle`` more seconds of watching, the
    generator is closed as a stopping triggerer would."""

    async def collect():
        gen = trigger.run()
        try:
            payloads = [(await asyncio.wait_for(anext(gen), timeout)).payload for _ in range(count)]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(anext(gen), settle)
            return payloads
        finally:
            await gen.aclose()

    return asyncio.run(collect())


def _no_event_within(trigger: DeltaTableNewVersionTrigger, seconds: float) -> bool:
    async def first():
        gen = trigger.run()
        try:
            await asyncio.wait_for(anext(gen), seconds)
            return False
        except TimeoutError:
            return True
        finally:
            await gen.aclose()

    return asyncio.run(first())


def _watcher(table_uri: str, store: FakeStateStore | None = None, **kwargs) -> DeltaTableNewVersionTrigger:
    trigger = DeltaTableNewVersionTrigger(table_uri=table_uri, aws_conn_id=None, poll_interval=0.05, **kwargs)
    trigger.asset_state_store = store
    return trigger


def test_watcher_fires_one_event_per_version_in_commit_order(table_uri, write_version):
    refs = [write_version(table_uri, f"2026-11-2{i}") for i in range(3)]

    payloads = _events(_watcher(table_uri, FakeStateStore(), from_version=0), 3)

    assert [p["version"] for p in payloads] == [0, 1, 2]
    assert [p["ref"] for p in payloads] == [r.to_dict() for r in refs]
    assert all(p["table_uri"] == refs[0].uri and p["latest"] == 2 for p in payloads)


def test_restarted_watcher_resumes_after_the_last_version_it_recorded(table_uri, write_version):
    store = FakeStateStore()
    for ds in ("2026-11-20", "2026-11-21"):
        write_version(table_uri, ds)
    assert [p["version"] for p in _events(_watcher(table_uri, store, from_version=0), 2, settle=0.3)] == [
        0,
        1,
    ]
    write_version(table_uri, "2026-11-22")

    # a new instance from the same kwargs: what the triggerer builds after a restart
    again = _events(_watcher(table_uri, store, from_version=0), 1)

    assert [p["version"] for p in again] == [2]


def test_version_fired_just_before_a_stop_is_fired_again_rather_than_lost(
    table_uri, write_version, monkeypatch
):
    monkeypatch.setattr(delta_triggers, "PERSIST_GRACE", 30.0)
    write_version(table_uri, "2026-11-20")
    store = FakeStateStore()
    assert [p["version"] for p in _events(_watcher(table_uri, store, from_version=0), 1)] == [0]

    # stopped within the grace: the event may not have reached the database, so it is not recorded
    assert store.data == {}
    assert [p["version"] for p in _events(_watcher(table_uri, store, from_version=0), 1)] == [0]


def test_watcher_without_from_version_ignores_versions_committed_before_its_first_look(
    table_uri, write_version
):
    write_version(table_uri, "2026-11-20")
    write_version(table_uri, "2026-11-21")
    store = FakeStateStore()
    assert _no_event_within(_watcher(table_uri, store), 0.5)
    write_version(table_uri, "2026-11-22")

    assert [p["version"] for p in _events(_watcher(table_uri, store), 1)] == [2]


def test_watcher_of_a_table_that_does_not_exist_yet_fires_for_its_first_version(tmp_path, write_version):
    table_uri = str(tmp_path / "later")
    store = FakeStateStore()
    assert _no_event_within(_watcher(table_uri, store), 0.3)
    write_version(table_uri, "2026-11-20")

    assert [p["version"] for p in _events(_watcher(table_uri, store), 1)] == [0]


def test_watcher_shared_by_several_assets_keeps_its_position_in_memory(table_uri, write_version):
    write_version(table_uri, "2026-11-20")
    write_version(table_uri, "2026-11-21")

    payloads = _events(_watcher(table_uri, FakeStateStore(shared=True), from_version=1), 1)

    assert [p["version"] for p in payloads] == [1]


def test_watcher_keeps_watching_a_table_it_cannot_read(tmp_path, write_version):
    table_uri = str(tmp_path / "broken")
    log = tmp_path / "broken" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text("not json\n")

    async def scenario():
        gen = _watcher(table_uri, FakeStateStore(), from_version=0).run()
        try:
            pending = asyncio.ensure_future(anext(gen))
            await asyncio.sleep(0.3)
            assert not pending.done()  # still polling, not crashed
            (log / f"{0:020d}.json").unlink()
            write_version(table_uri, "2026-11-20")
            return (await asyncio.wait_for(pending, 20)).payload
        finally:
            await gen.aclose()

    assert asyncio.run(scenario())["version"] == 0


def test_state_key_depends_on_the_table_only():
    a = DeltaTableNewVersionTrigger(table_uri="s3://lake/t", poll_interval=5)
    b = DeltaTableNewVersionTrigger(table_uri="s3://lake/t/", poll_interval=60, from_version=2)

    assert a.state_key == b.state_key != DeltaTableNewVersionTrigger(table_uri="s3://lake/u").state_key


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"table_uri": " "}, "table_uri"),
        ({"from_version": -1}, "from_version"),
        ({"from_version": "3"}, "from_version"),
    ],
)
def test_invalid_watcher_fails_when_the_dag_is_parsed(kwargs, field):
    with pytest.raises(InvalidSpecError, match=field):
        DeltaTableNewVersionTrigger(**{"table_uri": "/data/t", **kwargs})
