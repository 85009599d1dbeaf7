"""A commit that delta-rs reported done but that is not in the log is retried, never a user error.

On moto's server two conditional puts of one commit version can both succeed, the later replacing the
earlier commit (``airflow_provider_dltrain/testing/moto_server.py``). Simulated here on a local table: right after our
commit, its file is removed and another writer commits the same version, as the later put would.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import CommitConflictError
from airflow_provider_dltrain.lake import commit as txn
from airflow_provider_dltrain.lake.log import DeltaLog

DS = "2026-12-02"
SCHEMA = pa.schema([("x", pa.int64()), ("ds", pa.string())])
LOST = "is not in its log although delta-rs reported it done (attempt 1 of 8)"
_CREATE = DeltaTable.create_write_transaction  # unpatched, for the other writer


def _write_file(uri: str, name: str, xs: list[int]) -> lake.WrittenFile:
    import pyarrow.parquet as pq

    rel = f"ds={DS}/{name}.parquet"
    os.makedirs(os.path.join(uri, f"ds={DS}"), exist_ok=True)
    pq.write_table(pa.table({"x": xs}), os.path.join(uri, rel))
    size = os.path.getsize(os.path.join(uri, rel))
    return lake.WrittenFile(rel, size, len(xs), json.dumps({"numRecords": len(xs)}), int(time.time() * 1000))


def _rows(uri: str) -> list[int]:
    return sorted(r["x"] for r in lake.open_table(uri).to_pyarrow_table().to_pylist() if r["ds"] == DS)


def _replace_newest_commit(uri: str) -> None:
    """Another writer's commit of the same version replaces ours (it empties the partition)."""
    newest = lake.latest(uri).version
    os.remove(os.path.join(uri, "_delta_log", f"{newest:020d}.json"))
    other = DeltaTable(uri)
    _CREATE(
        other,
        [],
        mode="overwrite",
        schema=other.schema(),
        partition_by=["ds"],
        partition_filters=[("ds", "=", DS)],
        commit_properties=txn.commit_properties({}, {"ds": DS}, txn.new_token()),
    )
    assert lake.latest(uri).version == newest


def _lose_commits_of_files(monkeypatch, uri: str, times: int) -> list[int]:
    lost: list[int] = []

    def losing(self, *args, **kwargs):
        result = _CREATE(self, *args, **kwargs)
        if len(lost) < times:
            lost.append(1)
            _replace_newest_commit(uri)
        return result

    monkeypatch.setattr(DeltaTable, "create_write_transaction", losing)
    return lost


@pytest.fixture
def table(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [9]}), {"ds": DS})
    return uri


def test_a_lost_commit_of_written_files_is_retried_with_a_warning(table, monkeypatch, caplog):
    before = lake.latest(table).version
    lost = _lose_commits_of_files(monkeypatch, table, times=1)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    result = lake.commit_files(
        table, [_write_file(table, "mine", [1, 2])], SCHEMA, {"ds": DS}, partition_by=["ds"]
    )
    assert lost and result.committed and _rows(table) == [1, 2]
    # the other writer's commit stands at before + 1; ours is the retry, found through its token
    assert result.ref.version == lake.latest(table).version == before + 2
    (warning,) = [r for r in caplog.records if LOST in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert f"{{'ds': '{DS}'}}" in warning.getMessage() and "(txn " in warning.getMessage()
    assert "done at attempt 2" in caplog.text


def test_a_lost_predicate_overwrite_is_retried_with_a_warning(table, monkeypatch, caplog):
    import deltalake

    before = lake.latest(table).version
    original = deltalake.write_deltalake
    lost: list[int] = []

    def losing(*args, **kwargs):
        original(*args, **kwargs)
        if not lost:
            lost.append(1)
            _replace_newest_commit(table)

    monkeypatch.setattr(deltalake, "write_deltalake", losing)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    ref = lake.overwrite_partition(table, pa.table({"x": [5]}), {"ds": DS})
    assert lost and _rows(table) == [5]
    assert ref.version == lake.latest(table).version == before + 2
    assert LOST in caplog.text and "done at attempt 2" in caplog.text


def test_a_commit_found_late_keeps_its_files_and_commits_nothing_more(table, monkeypatch, caplog):
    """A stale read of the log: the commit is there, the first lookup misses it."""
    stale: list[int] = []

    class StaleOnce(DeltaLog):
        def latest_version(self, at_least=None):
            newest = super().latest_version(at_least)
            if not stale and newest is not None:
                stale.append(newest)
                return newest - 1
            return newest

    before = lake.latest(table).version
    monkeypatch.setattr(txn, "DeltaLog", StaleOnce)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    result = lake.commit_files(
        table, [_write_file(table, "mine", [1, 2])], SCHEMA, {"ds": DS}, partition_by=["ds"]
    )
    assert stale and LOST in caplog.text
    # the retry finds this write's rows (its own commit) and neither commits again nor deletes its files
    assert result.committed and result.ref.version == lake.latest(table).version == before + 1
    assert os.path.exists(os.path.join(table, f"ds={DS}", "mine.parquet"))
    assert _rows(table) == [1, 2]


def test_commits_lost_every_attempt_end_in_a_conflict_error(table, monkeypatch):
    monkeypatch.setattr(txn, "COMMIT_ATTEMPTS", 3)
    _lose_commits_of_files(monkeypatch, table, times=10)
    with pytest.raises(
        CommitConflictError, match=r"3 attempts to commit \{'ds': '2026-12-02'\}.*not in its log"
    ):
        lake.commit_files(table, [_write_file(table, "mine", [1])], SCHEMA, {"ds": DS}, partition_by=["ds"])
    assert _rows(table) == []  # the other writer's commits stand
