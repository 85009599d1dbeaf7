from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidSpecError, TableNotFoundError


def _write(uri, ds, n=3):
    return lake.overwrite_partition(uri, pa.table({"x": list(range(n))}), {"ds": ds})


def test_deltaref_round_trips_through_json_and_xcom_dicts():
    ref = lake.DeltaRef("s3://bucket/t", 7, "2026-11-28T00:00:00+00:00")
    assert lake.DeltaRef.from_json(ref.to_json()) == ref
    assert lake.DeltaRef.coerce(json.loads(ref.to_json())) == ref
    assert lake.DeltaRef.coerce(ref.to_json()) == ref
    with pytest.raises(InvalidSpecError, match="version"):
        lake.DeltaRef("t", -1)
    with pytest.raises(InvalidSpecError, match="uri"):
        lake.DeltaRef.from_dict({"version": 1})


def test_latest_version_and_partition_presence_follow_commits(tmp_path):
    uri = str(tmp_path / "t")
    assert lake.DeltaLog(uri).latest_version() is None
    with pytest.raises(TableNotFoundError):
        lake.latest(uri)
    for i in range(25):  # new rows each time: an identical re-write would commit nothing
        _write(uri, f"2026-11-{(i % 5) + 1:02d}", n=i + 1)
    assert lake.latest(uri).version == 24
    assert lake.has_partition(uri, 0, {"ds": "2026-11-01"})
    assert not lake.has_partition(uri, 0, {"ds": "2026-11-02"})
    assert lake.has_partition(uri, 24, {"ds": "2026-11-05"})
    assert not lake.has_partition(uri, 24, {"ds": "2026-12-01"})


def test_partition_presence_and_latest_agree_with_delta_rs_after_checkpoints(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(12):
        _write(uri, f"2026-11-{i + 1:02d}")
    lake.open_table(uri).create_checkpoint()
    for i in range(12, 15):
        _write(uri, f"2026-11-{i + 1:02d}")
    table = lake.open_table(uri)
    assert lake.latest(uri).version == table.version() == 14
    expected = {p["ds"] for p in table.partitions()}
    present = {
        f"2026-11-{d:02d}" for d in range(1, 32) if lake.has_partition(uri, 14, {"ds": f"2026-11-{d:02d}"})
    }
    assert present == expected


def test_as_of_returns_the_version_current_at_a_time(tmp_path):
    uri = str(tmp_path / "t")
    refs = [_write(uri, f"2026-11-0{i + 1}") for i in range(3)]
    t1 = datetime.fromisoformat(refs[1].timestamp)
    assert lake.as_of(uri, t1).version == 1
    assert lake.as_of(uri, t1 + timedelta(milliseconds=1)).version in (1, 2)
    assert lake.as_of(uri, datetime.now(timezone.utc) + timedelta(days=1)).version == 2
    with pytest.raises(TableNotFoundError, match="did not exist"):
        lake.as_of(uri, t1 - timedelta(days=1))


def test_a_commit_file_that_cannot_be_read_raises_instead_of_passing_for_a_cleaned_log(tmp_path):
    """A timeout or a refused read of a commit file is not "removed by log retention": read as absent,
    the partition's last write recorded nothing and an unchanged re-run recomputed."""
    import shutil

    from airflow_provider_dltrain.exceptions import StorageReadError
    from airflow_provider_dltrain.lake.rerun_facts import last_write

    uri = str(tmp_path / "t")
    _write(uri, "2026-11-01")
    _write(uri, "2026-11-02")
    assert last_write(uri, {"ds": "2026-11-02"}).info["operation"]
    commit = tmp_path / "t" / "_delta_log" / f"{1:020d}.json"
    shutil.move(commit, tmp_path / "saved.json")
    commit.mkdir()  # still listed, unreadable: what a read that times out looks like to the caller
    with pytest.raises(StorageReadError, match=f"could not read .*{commit.name}"):
        last_write(uri, {"ds": "2026-11-02"})
    commit.rmdir()
    shutil.move(tmp_path / "saved.json", commit)
    assert last_write(uri, {"ds": "2026-11-02"}).ref.version == 1
    # a path inside a plain file is no table, as a missing one is (a file input asked for its log)
    (tmp_path / "raw.parquet").write_bytes(b"PAR1")
    assert lake.DeltaLog(str(tmp_path / "raw.parquet")).latest_version() is None
