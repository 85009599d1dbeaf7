"""Training on a table whose Parquet files still hold rows a deletion vector removed (as Spark and
Databricks write them): the rows are gone from every batch, and the fingerprint says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from training_digits import DAYS, digits_partition, write_digits

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import SchemaMismatchError
from airflow_provider_dltrain.training import fingerprint, resolve
from airflow_provider_dltrain.training.loader import DeltaLoader, LoaderSpec, num_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from deletion_vectors import delete_with_deletion_vector, enable_column_mapping

DROPPED = [0, 3, 16]  # row indices in the file of partition DAYS[0]; their labels are 0, 6, 5


def _enable_deletion_vectors(uri: str) -> None:
    from deltalake import DeltaTable
    from deltalake.table import TableFeatures

    DeltaTable(uri).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)


def _keys_of_rows(uri: str, ds: str, rows: list[int]) -> set[str]:
    (path,) = (Path(uri) / f"ds={ds}").glob("*.parquet")
    return set(pq.read_table(path, columns=["source_file"]).column("source_file").take(rows).to_pylist())


@pytest.fixture(scope="module")
def deleted(tmp_path_factory):
    """Two days of digits; the last version drops three rows of the first day by a deletion vector."""
    uri = str(tmp_path_factory.mktemp("dv-lake") / "digits")
    write_digits(uri, DAYS[:2])
    _enable_deletion_vectors(uri)
    before = lake.latest(uri)
    delete_with_deletion_vector(uri, {"ds": DAYS[0]}, DROPPED)
    return {"ref": lake.latest(uri), "before": before, "gone": _keys_of_rows(uri, DAYS[0], DROPPED)}


def _keys(day_index: int, label_below: int = 10) -> set[str]:
    rows = digits_partition(day_index, 2).to_pylist()
    return {r["source_file"] for r in rows if r["label"] < label_below}


@pytest.mark.parametrize("mode", ["memory", "stream"])
@pytest.mark.parametrize(
    ("data_filter", "selected"),
    [
        (None, lambda: _keys(0) | _keys(1)),
        ([["label", "<", 5], ["ds", "=", DAYS[0]]], lambda: _keys(0, label_below=5)),  # rows then filter
    ],
)
def test_rows_a_deletion_vector_removed_are_in_no_batch_in_either_loader_mode(
    deleted, mode, data_filter, selected
):
    plan = resolve(deleted["ref"], data_filter)
    spec = LoaderSpec(plan, 64, ("label", "source_file"), seed=3, mode=mode, shuffle_buffer_mb=0.01)
    seen = [k for batch in DeltaLoader(spec) for k in batch["source_file"]]
    assert deleted["gone"] & selected()  # a deleted row would match the filter
    assert not set(seen) & deleted["gone"]
    assert sorted(seen) == sorted(selected() - deleted["gone"])
    assert num_rows(spec) == len(seen)


def test_the_fingerprint_of_a_version_with_deleted_rows_names_the_rows_that_remain(deleted, tmp_path):
    assert fingerprint(deleted["ref"]) != fingerprint(deleted["before"])
    # the same remaining rows written plainly, without a deletion vector: the same fingerprint
    uri = str(tmp_path / "plain")
    first = digits_partition(0, 2)
    keep = [i for i in range(first.num_rows) if i not in DROPPED]
    lake.overwrite_partition(uri, first.take(keep), {"ds": DAYS[0]})
    plain = lake.overwrite_partition(uri, digits_partition(1, 2), {"ds": DAYS[1]})
    assert fingerprint(plain) == fingerprint(deleted["ref"])
    assert resolve(deleted["ref"]).num_records == len(_keys(0) | _keys(1)) - len(DROPPED)


def test_an_unpartitioned_table_fingerprints_its_rows_after_the_deletion_vector(tmp_path):
    from deltalake import write_deltalake

    def table(name: str, ids: list[int], configuration=None) -> str:
        uri = str(tmp_path / name)
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64())}), configuration=configuration)
        return uri

    uri = table("dv", list(range(10)), {"delta.enableDeletionVectors": "true"})
    before = fingerprint(lake.latest(uri))
    delete_with_deletion_vector(uri, {}, [3, 4])
    after = fingerprint(lake.latest(uri))
    assert after != before
    assert after == fingerprint(lake.latest(table("plain", [0, 1, 2, 5, 6, 7, 8, 9])))


def test_a_column_mapped_table_is_refused_with_the_readers_message(tmp_path):
    uri = str(tmp_path / "digits")
    write_digits(uri, DAYS[:1])
    version = enable_column_mapping(uri)
    with pytest.raises(
        SchemaMismatchError,
        match=rf"version {version} uses Delta reader feature\(s\) \['columnMapping'\], which this reader cannot honour",
    ):
        resolve(lake.latest(uri))
