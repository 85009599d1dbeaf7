"""cutoff_commit and partition_commits: the versions and commits a training run on ds <= D came from."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidPartitionError, TableNotFoundError
from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit, partition_commits

D1, D2, D3, D4, D5 = (f"2026-11-0{i}" for i in range(1, 6))


def _write(uri, ds, values, **meta):
    return lake.overwrite_partition(
        uri, pa.table({"x": values}), {"ds": ds}, metadata=lake.commit_metadata(**meta)
    )


@pytest.fixture
def days(tmp_path):
    uri = str(tmp_path / "t")
    refs = [_write(uri, ds, [i]) for i, ds in enumerate([D1, D2, D3, D4])]
    return uri, refs


def test_cutoff_is_the_newest_commit_at_or_before_the_date(days):
    uri, refs = days
    assert cutoff_commit(uri, {"ds": D3}).version == refs[2].version == 2
    assert cutoff_commit(uri, {"ds": D1}).version == 0
    assert cutoff_commit(uri, {"ds": "2026-11-03T12:00"}).version == 2  # string order, like ISO dates


def test_a_restated_earlier_partition_moves_the_cutoff_and_later_partitions_never_do(days):
    uri, _ = days
    restated = _write(uri, D2, [20])
    assert restated.version == 4
    assert cutoff_commit(uri, {"ds": D3}).version == 4
    assert partition_commit(uri, {"ds": D3}).version == 2  # partition_commit sees only D3 itself
    _write(uri, D5, [5])
    _write(uri, D4, [40])
    assert cutoff_commit(uri, {"ds": D3}).version == 4
    assert cutoff_commit(uri, {"ds": D1}).version == 0
    assert cutoff_commit(uri, {"ds": D3}, at_version=3).version == 2
    assert cutoff_commit(uri, {"ds": D5}).version == 6


def test_an_identical_rewrite_of_an_earlier_partition_does_not_move_the_cutoff(days):
    uri, _ = days
    _write(uri, D2, [1])
    assert cutoff_commit(uri, {"ds": D3}).version == 2


def test_cutoff_before_any_partition_says_why_and_survives_a_cut_log(days, tmp_path):
    uri, _ = days
    with pytest.raises(TableNotFoundError, match=r"no commit .* wrote any partition"):
        cutoff_commit(uri, {"ds": "2026-10-01"})
    with pytest.raises(InvalidPartitionError, match="upper"):
        cutoff_commit(uri, {"ds": "2026-11-01' OR '1'='1"})
    with pytest.raises(TableNotFoundError, match="no Delta table"):
        cutoff_commit(str(tmp_path / "none"), {"ds": D1})
    lake.open_table(uri).create_checkpoint()
    for version in (0, 1):
        os.remove(os.path.join(uri, "_delta_log", f"{version:020d}.json"))  # what log retention does
    # the history index the writes kept still knows the commits whose files are gone
    assert cutoff_commit(uri, {"ds": D1}).version == 0
    assert cutoff_commit(uri, {"ds": D3}).version == 2


def test_partition_commits_lists_each_live_partition_with_the_task_that_wrote_it(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, D1, [1], dag_id="etl", run_id="r1", task_id="write", try_number=1, logical_date=D1)
    _write(uri, D2, [2], dag_id="etl", run_id="r2", task_id="write", try_number=1)
    _write(uri, D3, [3])
    restated = _write(uri, D1, [10], dag_id="etl", run_id="r1", task_id="write", try_number=2)
    _write(uri, D2, [2])  # identical: commits nothing, the lineage keeps the first write

    rows = partition_commits(uri, restated.version)
    assert [(r["partition"], r["version"]) for r in rows] == [
        ({"ds": D1}, 3),
        ({"ds": D2}, 1),
        ({"ds": D3}, 2),
    ]
    first = rows[0]
    assert (first["dag_id"], first["run_id"], first["try_number"], first["logical_date"]) == (
        "etl",
        "r1",
        "2",
        None,
    )
    assert first["digest"] == lake.partition_digest(uri, 3, {"ds": D1})
    assert first["timestamp"] == restated.timestamp
    assert rows[2]["dag_id"] is None
    assert [r["partition"]["ds"] for r in partition_commits(uri, 3, upper={"ds": D2})] == [D1, D2]
    assert [r["version"] for r in partition_commits(uri, 1)] == [0, 1]  # as the table was at version 1
