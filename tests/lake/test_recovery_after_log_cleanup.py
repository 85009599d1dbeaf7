"""A pinned version read after log clean-up: the same rows and columns, or a refusal naming what differs.

Small tables written with delta-rs as the stages write them (the history index caught up after each
commit, as the provider's writes do), a checkpoint, then the commit files older than it removed
the way delta-rs's log clean-up removes them (aged past ``delta.logRetentionDuration``).
"""

from __future__ import annotations

import glob
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_dltrain.exceptions import HistoryGoneError, TableNotFoundError
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake.history_recovery import (
    column_differences,
    schema_changes_between,
    schema_fields,
)
from airflow_provider_dltrain.lake.reader import scan_version
from airflow_provider_dltrain.lake.ref import DeltaRef


def _write(uri: str, data: pa.Table, predicate: str | None = None, **kwargs) -> None:
    mode = "overwrite" if predicate else "append"
    write_deltalake(uri, data, partition_by=["h"], mode=mode, predicate=predicate, **kwargs)
    history_index.update(uri)  # what every write of the provider does after its commit


def _clean_log(uri: str) -> None:
    """A checkpoint at the newest version, then the older commit files aged and cleaned up."""
    table = DeltaTable(uri)
    table.create_checkpoint()
    then = time.time() - 60 * 86400
    for path in glob.glob(os.path.join(uri, "_delta_log", "*.json")):
        os.utime(path, (then, then))
    table.cleanup_metadata()
    assert not os.path.exists(os.path.join(uri, "_delta_log", f"{0:020d}.json"))


def _rows(scan) -> list[int]:
    return sorted(x for f in scan.files for x in pq.read_table(f.uri).column("x").to_pylist())


def _h(*values: int) -> pa.Array:
    return pa.array(values, pa.int32())


@pytest.fixture
def restated_h2(tmp_path):
    """``h`` an int partition column: v0 writes h=2 and h=10, v1 restates h=2; v0's commit file cleaned up."""
    uri = str(tmp_path / "t")
    _write(uri, pa.table({"h": _h(2, 10), "x": [1, 2]}))
    _write(uri, pa.table({"h": _h(2), "x": [99]}), predicate="h = 2")
    _clean_log(uri)
    return uri


def test_a_read_below_h_10_of_a_cleaned_version_is_refused_when_h_2_was_restated_since(restated_h2):
    # h=2 < 10 as numbers: the restated partition is selected (as text "2" < "10" is false, and v1's
    # restated rows were returned as v0's)
    with pytest.raises(
        HistoryGoneError, match=r"version 0 of .* cannot be read any more.*changed since \(h=2\)"
    ):
        scan_version(DeltaRef(restated_h2, 0), None, [("h", "<", 10)])


def test_a_read_of_the_untouched_int_partition_is_served_from_the_oldest_readable_version(
    restated_h2, caplog
):
    with caplog.at_level("WARNING"):
        scan = scan_version(DeltaRef(restated_h2, 0), None, [("h", ">=", 10)])
    assert _rows(scan) == [2] and "reading its rows from version 1" in caplog.text


def test_a_table_rebuilt_without_its_history_index_refuses_every_live_partition(tmp_path):
    """The index lost (a copy of the lake without ``_dltrain_history``): the commits before the
    oldest readable version are unknown, so no partition of version 0 is proven unchanged."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"h": _h(2, 10), "x": [1, 2]}), partition_by=["h"])
    write_deltalake(
        uri, pa.table({"h": _h(2), "x": [99]}), partition_by=["h"], mode="overwrite", predicate="h = 2"
    )
    _clean_log(uri)
    for filters in ([("h", "<", 10)], [("h", ">=", 10)], [("h", "in", [2, 10])]):
        with pytest.raises(HistoryGoneError):
            scan_version(DeltaRef(uri, 0), None, filters)


@pytest.fixture
def added_column(tmp_path):
    """v0 writes h=1 (column x); v1 writes h=2 with a new column y; v0's commit file cleaned up."""
    uri = str(tmp_path / "t")
    _write(uri, pa.table({"h": _h(1), "x": [1]}))
    _write(uri, pa.table({"h": _h(2), "x": [2], "y": ["new"]}), schema_mode="merge")
    _clean_log(uri)
    return uri


def test_a_column_added_after_the_pinned_version_refuses_the_read_naming_the_versions(added_column):
    # h=1 was never touched again: only the schema differs, and version 1's has y, which v0's lacks
    with pytest.raises(HistoryGoneError) as err:
        scan_version(DeltaRef(added_column, 0), None, [("h", "=", 1)])
    message = str(err.value)
    assert "version 0 of" in message and "commit(s) 1 changed the table's schema" in message
    assert (
        "y: " in message
        and "not proven to be version 0's: column 'y' is in no file of the rows read" in message
    )


def test_the_index_says_which_versions_changed_the_schema_and_when_it_cannot_know(added_column, tmp_path):
    index = history_index.load(added_column)
    assert schema_changes_between(index, 0, 1) == [1] and schema_changes_between(index, 1, 1) == []
    lost = str(tmp_path / "lost")
    write_deltalake(lost, pa.table({"h": _h(1), "x": [1]}), partition_by=["h"])
    write_deltalake(lost, pa.table({"h": _h(2), "x": [2]}), partition_by=["h"], mode="append")
    _clean_log(lost)
    assert schema_changes_between(history_index.load(lost), 0, 1) is None  # its commits were never indexed


def test_a_property_change_between_is_not_a_schema_change(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, pa.table({"h": _h(1), "x": [1]}))
    DeltaTable(uri).alter.set_table_properties({"delta.checkpointInterval": "10"})
    history_index.update(uri)
    _write(uri, pa.table({"h": _h(2), "x": [2]}))
    _clean_log(uri)
    assert _rows(scan_version(DeltaRef(uri, 0), None, [("h", "=", 1)])) == [1]


def test_column_differences_name_added_dropped_retyped_and_repartitioned_columns():
    before = {"x": '"long"', "z": '"string"', "partition:h": ""}
    after = {"x": '"string"', "y": '"long"', "partition:d": ""}
    assert column_differences(before, after) == [
        "partition column 'd' added",
        "partition column 'h' dropped",
        "column 'x' retyped long -> string",
        "column 'y' added",
        "column 'z' dropped",
    ]
    assert column_differences(before, dict(before)) == []


def test_a_vacuumed_pin_served_from_the_newest_version_refuses_an_added_column_naming_it(tmp_path):
    """Files of v0's h=1 compacted at v1 and vacuumed; v2 adds column y: the compaction's rows are v0's,
    but the newest version's columns are not."""
    uri = str(tmp_path / "t")
    _write(uri, pa.table({"h": _h(1), "x": [1]}))
    _write(uri, pa.table({"h": _h(1), "x": [5]}))  # a second file, so the compaction rewrites both
    DeltaTable(uri).optimize.compact()
    history_index.update(uri)
    _write(uri, pa.table({"h": _h(2), "x": [2], "y": ["new"]}), schema_mode="merge")
    DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(TableNotFoundError, match=r"other columns than version 1 \(column 'y' added\)"):
        scan_version(DeltaRef(uri, 1), None, [("h", "=", 1)])


def test_schema_fields_mark_partition_columns(restated_h2):
    fields = schema_fields(DeltaTable(restated_h2))
    assert fields["partition:h"] == "" and fields["h"] == '"integer"' and fields["x"] == '"long"'
