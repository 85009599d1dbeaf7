"""Lineage lists the partitions a model's training filter selected, compared in the column's type."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lineage import _training_partitions


def test_training_partitions_of_an_int_partition_filter_are_those_below_the_bound_as_numbers(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(
        uri, pa.table({"h": pa.array([2, 9, 10, 11], pa.int32()), "x": [1, 2, 3, 4]}), partition_by=["h"]
    )
    history_index.update(uri)
    listed = _training_partitions(uri, 0, [["h", "<", "10"]], None)
    assert [c["partition"] for c in listed] == [{"h": "2"}, {"h": "9"}]  # as text, "2" and "9" are not < "10"
