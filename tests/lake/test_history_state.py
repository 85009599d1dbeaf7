"""lake.state.one_state: a plan over many dates reads each table's history once, and never an older
state than a reader asks for."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.lake import history_index, state
from airflow_provider_dltrain.lake.history import cutoff_commit


def _write(uri: str, ds: str, value: int):
    return lake.overwrite_partition(uri, pa.table({"x": [value]}), {"ds": ds})


def test_inside_one_state_a_table_is_read_once_and_a_newer_version_or_the_newest_reads_it_again(
    tmp_path, monkeypatch
):
    uri = str(tmp_path / "t")
    first = _write(uri, "2026-11-01", 1)
    reads: list[int | None] = []
    real = history_index._load

    def counted(*args):
        if not args[3]:  # a reader's load (the writer's own, which persists, is not counted)
            reads.append(args[2])  # newest
        return real(*args)

    monkeypatch.setattr(history_index, "_load", counted)
    with state.one_state():
        index = history_index.load(uri, newest=first.version)
        assert history_index.load(uri, newest=first.version) is index
        assert history_index.load(uri + "/", newest=0) is index
        assert reads == [0]
        # a version the kept index does not hold is read, never answered from the older state
        second = _write(uri, "2026-11-02", 2)
        newer = history_index.load(uri, newest=second.version)
        assert newer is not index and newer.last_write((("ds", "2026-11-02"),)) is not None
        # the newest version: read once more (the kept one was loaded up to a version, not the newest)
        newest = history_index.load(uri)
        assert history_index.load(uri) is newest and history_index.load(uri, newest=1) is newest
        assert reads == [0, 1, None]
        assert cutoff_commit(uri, {"ds": "2026-11-02"}).version == second.version
        # other storage options are another question
        history_index.load(uri, {"timeout": "5s"})
        assert reads == [0, 1, None, None]
    # outside the block nothing is kept
    history_index.load(uri)
    history_index.load(uri)
    assert reads == [0, 1, None, None, None, None]


def test_inside_one_state_a_partition_check_reads_each_commit_file_and_checkpoint_once(tmp_path, monkeypatch):
    from airflow_provider_dltrain.lake.log import DeltaLog
    from airflow_provider_dltrain.lake.table import has_partition, open_table

    uri = str(tmp_path / "t")
    for i in range(5):
        _write(uri, f"2026-11-0{i + 1}", i)
    open_table(uri).create_checkpoint()
    for i in range(5, 8):
        _write(uri, f"2026-11-0{i + 1}", i)
    version = lake.latest(uri).version
    days = [f"2026-11-0{i}" for i in range(1, 10)]  # the 9th is not there
    outside = [has_partition(uri, version, {"ds": d}) for d in days]
    assert outside == [True] * 8 + [False]
    reads: list[str] = []
    real = DeltaLog._read_text

    def counted(self, path):
        reads.append(path)
        return real(self, path)

    monkeypatch.setattr(DeltaLog, "_read_text", counted)
    with state.one_state():
        inside = [has_partition(uri, version, {"ds": d}) for d in days]
        commits = [r for r in reads if r.endswith(".json") and "_last_checkpoint" not in r]
        assert inside == outside and len(commits) == len(set(commits)) == 4  # the checkpoint's commit on
    reads.clear()
    assert [has_partition(uri, version, {"ds": d}) for d in days] == outside
    assert len([r for r in reads if r.endswith(".json") and "_last_checkpoint" not in r]) > 4
