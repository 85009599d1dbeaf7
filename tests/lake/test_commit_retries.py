"""Commit conflicts are detected by delta-rs and retried from a fresh snapshot (no lock anywhere)."""

from __future__ import annotations

import json
import logging
import os
import time

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import CommitConflictError
from airflow_provider_dltrain.lake import commit as txn

DS = "2026-11-28"
SCHEMA = pa.schema([("x", pa.int64()), ("ds", pa.string())])


def _write_file(uri: str, name: str, xs: list[int]) -> lake.WrittenFile:
    import pyarrow.parquet as pq

    rel = f"ds={DS}/{name}.parquet"
    os.makedirs(os.path.join(uri, f"ds={DS}"), exist_ok=True)
    pq.write_table(pa.table({"x": xs}), os.path.join(uri, rel))
    size = os.path.getsize(os.path.join(uri, rel))
    return lake.WrittenFile(rel, size, len(xs), json.dumps({"numRecords": len(xs)}), int(time.time() * 1000))


def _rows(uri: str) -> list[int]:
    return sorted(r["x"] for r in lake.open_table(uri).to_pyarrow_table().to_pylist() if r["ds"] == DS)


def _interfere_before_each_commit(monkeypatch, uri: str, rows: list[int], times: int) -> list[int]:
    """Make another writer commit ``rows`` to the partition just before each of our next commits."""
    from deltalake import DeltaTable

    original = DeltaTable.create_write_transaction
    done: list[int] = []

    def racing(self, *args, **kwargs):
        if len(done) < times:
            done.append(1)
            other = DeltaTable(uri)  # a second writer, from its own fresh snapshot
            original(
                other,
                [],
                mode="overwrite",
                schema=other.schema(),
                partition_by=["ds"],
                partition_filters=[("ds", "=", DS)],
                commit_properties=txn.commit_properties({}, {"ds": DS}, txn.new_token()),
            )
            if rows:
                lake.overwrite_partition(uri, pa.table({"x": rows}), {"ds": DS})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", racing)
    return done


def test_a_commit_that_loses_a_race_is_retried_and_replaces_the_winners_rows(tmp_path, monkeypatch, caplog):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [0]}), {"ds": "2026-11-27"})
    _interfere_before_each_commit(monkeypatch, uri, [], times=1)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    result = lake.commit_files(
        uri, [_write_file(uri, "mine", [1, 2])], SCHEMA, {"ds": DS}, partition_by=["ds"]
    )
    assert result.committed and _rows(uri) == [1, 2]
    assert "attempt 1 of 8" in caplog.text and "done at attempt 2" in caplog.text
    assert lake.latest(uri).version == result.ref.version  # found through its own txn token


def test_a_retry_that_finds_identical_rows_commits_nothing(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [9]}), {"ds": DS})
    # the other writer commits exactly our rows while we are about to commit
    done = _interfere_before_each_commit(monkeypatch, uri, [1, 2], times=1)
    before = lake.latest(uri).version
    result = lake.commit_files(
        uri, [_write_file(uri, "mine", [2, 1])], SCHEMA, {"ds": DS}, partition_by=["ds"]
    )
    assert done and not result.committed
    assert _rows(uri) == [1, 2] and lake.latest(uri).version == before + 2  # the other writer's 2 commits
    assert not os.path.exists(os.path.join(uri, f"ds={DS}", "mine.parquet"))  # our unused file is removed


def test_a_writer_that_keeps_losing_fails_with_a_clear_conflict_error(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [9]}), {"ds": DS})
    monkeypatch.setattr(txn, "COMMIT_ATTEMPTS", 3)
    _interfere_before_each_commit(monkeypatch, uri, [], times=10)
    with pytest.raises(
        CommitConflictError, match=r"3 attempts to commit \{'ds': '2026-11-28'\}.*concurrent writer"
    ):
        lake.commit_files(uri, [_write_file(uri, "mine", [1])], SCHEMA, {"ds": DS}, partition_by=["ds"])


def test_a_predicate_overwrite_that_loses_a_race_is_retried(tmp_path, monkeypatch, caplog):
    from deltalake import DeltaTable

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [9]}), {"ds": DS})
    import deltalake

    original = deltalake.write_deltalake
    calls: list[int] = []

    def racing(*args, **kwargs):
        if not calls:
            calls.append(1)
            other = DeltaTable(uri)
            other.create_write_transaction(
                [],
                mode="overwrite",
                schema=other.schema(),
                partition_by=["ds"],
                partition_filters=[("ds", "=", DS)],
                commit_properties=txn.commit_properties({}, {"ds": DS}, txn.new_token()),
            )
        return original(*args, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", racing)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    ref = lake.overwrite_partition(uri, pa.table({"x": [5]}), {"ds": DS})
    assert _rows(uri) == [5] and ref.version == lake.latest(uri).version
    assert "attempt 1 of 8" in caplog.text


def test_writes_of_different_partitions_never_conflict(tmp_path):
    import threading

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [0]}), {"ds": "2026-11-01"})
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def write(i: int) -> None:
        barrier.wait()
        try:
            lake.overwrite_partition(uri, pa.table({"x": [i]}), {"ds": f"2026-11-1{i}"})
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert lake.latest(uri).version == 4
