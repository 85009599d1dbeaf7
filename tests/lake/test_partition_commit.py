from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake.history import partition_commit


def test_partition_commit_pins_the_version_that_last_wrote_the_partition(tmp_path):
    uri = str(tmp_path / "t")
    for ds in ["2026-11-01", "2026-11-02", "2026-11-03"]:
        lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": ds})
    assert partition_commit(uri, {"ds": "2026-11-02"}).version == 1
    lake.overwrite_partition(uri, pa.table({"x": [2]}), {"ds": "2026-11-02"})  # restated
    assert partition_commit(uri, {"ds": "2026-11-02"}).version == 3
    assert partition_commit(uri, {"ds": "2026-11-02"}, at_version=2).version == 1
    assert partition_commit(uri, {"ds": "2026-11-03"}).version == 2
    with pytest.raises(TableNotFoundError, match="2026-11-09"):
        partition_commit(uri, {"ds": "2026-11-09"})


def test_a_write_reports_its_own_commit_even_when_another_partition_committed_after_it(tmp_path):
    from airflow_provider_dltrain.lake.write import _own_commit

    uri = str(tmp_path / "t")
    mine = lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-01"})
    lake.overwrite_partition(uri, pa.table({"x": [2]}), {"ds": "2026-11-02"})  # another run, later
    assert _own_commit(uri, {"ds": "2026-11-01"}, None).version == mine.version == 0


def test_pinning_a_partition_older_than_the_retained_log_still_finds_its_commit(tmp_path):
    import os

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-01"})
    lake.overwrite_partition(uri, pa.table({"x": [2]}), {"ds": "2026-11-02"})
    lake.open_table(uri).create_checkpoint()
    os.remove(os.path.join(uri, "_delta_log", f"{0:020d}.json"))  # what log retention does
    # the provider's history index recorded the write when it committed
    assert partition_commit(uri, {"ds": "2026-11-01"}).version == 0
    assert partition_commit(uri, {"ds": "2026-11-02"}).version == 1


def test_a_table_another_tool_wrote_pins_to_its_oldest_readable_version_once_the_log_is_cut(tmp_path, caplog):
    import os

    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    for day, x in (("2026-11-01", 1), ("2026-11-02", 2), ("2026-11-03", 3)):
        write_deltalake(uri, pa.table({"x": [x], "ds": [day]}), partition_by=["ds"], mode="append")
    lake.open_table(uri).create_checkpoint()  # at version 2
    for version in (0, 1):
        os.remove(os.path.join(uri, "_delta_log", f"{version:020d}.json"))  # what log retention does
    with caplog.at_level("WARNING"):
        ref = partition_commit(uri, {"ds": "2026-11-01"})
    assert ref.version == 2  # the oldest version the log can still read holds the same partition
    assert "removed by the table's log retention" in caplog.text and "same content" in caplog.text
    rows = lake.open_table(uri, ref.version).to_pyarrow_table(filters=[("ds", "=", "2026-11-01")])
    assert rows.column("x").to_pylist() == [1]
