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


def test_pinning_a_partition_older_than_the_retained_log_says_why_and_what_to_do(tmp_path):
    import os

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-01"})
    lake.overwrite_partition(uri, pa.table({"x": [2]}), {"ds": "2026-11-02"})
    lake.open_table(uri).create_checkpoint()
    os.remove(os.path.join(uri, "_delta_log", f"{0:020d}.json"))  # what log retention does
    with pytest.raises(TableNotFoundError, match="log retention"):
        partition_commit(uri, {"ds": "2026-11-01"})
    assert partition_commit(uri, {"ds": "2026-11-02"}).version == 1
