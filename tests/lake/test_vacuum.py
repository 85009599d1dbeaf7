"""``vacuum`` removes what killed writes left behind, and nothing a version references."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidSpecError, TableNotFoundError
from airflow_provider_dltrain.lake.maintenance import table_retention_hours, vacuum

DS = "2026-11-28"
STRAYS = ["part-killed-00000.snappy.parquet", "part-killed-00001.snappy.parquet", "part-cut.parquet#1"]


def _leave_strays(uri: str, age_hours: float) -> list[str]:
    then = time.time() - age_hours * 3600
    for name in STRAYS:
        path = os.path.join(uri, f"ds={DS}", name)
        with open(path, "wb") as handle:
            handle.write(b"PAR1 half a file")
        os.utime(path, (then, then))
    return [f"ds={DS}/{name}" for name in STRAYS]


def _table(tmp_path) -> str:
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": DS})
    return uri


def _rows(uri: str) -> list[int]:
    return sorted(lake.open_table(uri).to_pyarrow_table().column("x").to_pylist())


def test_plain_delta_vacuum_misses_the_files_of_killed_writes_and_ours_removes_them(tmp_path):
    uri = _table(tmp_path)
    strays = _leave_strays(uri, age_hours=24 * 8)
    assert lake.open_table(uri).vacuum(dry_run=True) == []  # never referenced: invisible to a plain vacuum
    result = vacuum(uri)
    assert result.files == sorted(strays) and not result.dry_run
    assert sorted(os.listdir(os.path.join(uri, f"ds={DS}"))) == sorted(
        os.path.basename(u) for u in lake.active_files(uri, lake.latest(uri).version)
    )
    assert _rows(uri) == [1, 2]


def test_dry_run_lists_without_deleting(tmp_path):
    uri = _table(tmp_path)
    strays = _leave_strays(uri, age_hours=24 * 8)
    assert vacuum(uri, dry_run=True).files == sorted(strays)
    assert all(os.path.exists(os.path.join(uri, s)) for s in strays)


def test_files_younger_than_the_tables_retention_stay(tmp_path):
    uri = _table(tmp_path)
    strays = _leave_strays(uri, age_hours=2)  # a write that may still be running
    assert vacuum(uri).files == []
    assert all(os.path.exists(os.path.join(uri, s)) for s in strays)


def test_a_retention_below_the_tables_needs_force(tmp_path):
    uri = _table(tmp_path)
    strays = _leave_strays(uri, age_hours=2)
    with pytest.raises(InvalidSpecError, match="--force"):
        vacuum(uri, retention_hours=1)
    assert all(os.path.exists(os.path.join(uri, s)) for s in strays)
    assert vacuum(uri, retention_hours=1, force=True).files == sorted(strays)
    assert _rows(uri) == [1, 2]


def test_the_tables_own_retention_is_honoured(tmp_path):
    uri = str(tmp_path / "t")
    from deltalake import write_deltalake

    write_deltalake(
        uri,
        pa.table({"x": [1], "ds": [DS]}),
        partition_by=["ds"],
        configuration={"delta.deletedFileRetentionDuration": "interval 1 hours"},
    )
    assert table_retention_hours(lake.open_table(uri)) == 1.0
    strays = _leave_strays(uri, age_hours=2)
    assert vacuum(uri).files == sorted(strays)


def test_vacuum_of_a_missing_table_says_so(tmp_path):
    with pytest.raises(TableNotFoundError, match="no Delta table"):
        vacuum(str(tmp_path / "nope"))
