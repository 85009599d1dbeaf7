"""Delta inputs read as Delta defines their rows: deleted rows gone, filters checked before any job."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_dltrain.etl import read_delta, read_inputs
from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.lake import latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from deletion_vectors import delete_with_deletion_vector, enable_column_mapping

DV_ON = {"delta.enableDeletionVectors": "true"}


def _table(path: Path, configuration=None) -> str:
    from deltalake import write_deltalake

    uri = str(path / "t")
    data = pa.table({"id": pa.array(range(10), pa.int64()), "ds": ["a"] * 5 + ["b"] * 5})
    write_deltalake(uri, data, partition_by=["ds"], configuration=configuration)
    return uri


def _ids(df) -> list[int]:
    return sorted(r.id for r in df.collect())


def test_a_row_deleted_through_delta_rs_is_not_read_from_the_delta_input(spark, tmp_path):
    from deltalake import DeltaTable

    uri = _table(tmp_path, DV_ON)  # delta-rs 1.6 rewrites the file; the table carries the DV feature
    DeltaTable(uri).delete("id = 3")
    inputs = {"prev": {**latest(uri).to_dict(), "filters": [["ds", "=", "a"]]}}
    assert _ids(read_inputs(spark, inputs)["prev"]) == [0, 1, 2, 4]


def test_rows_dropped_by_a_deletion_vector_are_skipped_and_older_versions_still_have_them(spark, tmp_path):
    uri = _table(tmp_path, DV_ON)
    version = delete_with_deletion_vector(uri, {"ds": "a"}, [3])  # the row with id 3
    ref = latest(uri)
    assert ref.version == version
    assert _ids(read_delta(spark, ref)) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert _ids(read_delta(spark, ref, filters=[["ds", "in", ["a"]], ["id", ">", 1]])) == [2, 4]
    assert _ids(read_delta(spark, type(ref)(ref.uri, 0))) == list(range(10))


def test_partition_columns_keep_the_tables_type_and_filters_select_rows(spark, tmp_path):
    from deltalake import write_deltalake

    uri = str(tmp_path / "typed")
    write_deltalake(
        uri, pa.table({"id": [1, 2, 3], "day": pa.array([1, 1, 2], pa.int32())}), partition_by=["day"]
    )
    df = read_delta(spark, latest(uri), filters=[["day", "=", "1"], ["id", "!=", 2]])
    assert dict(df.dtypes)["day"] == "int" and _ids(df) == [1]


def test_timestamps_with_and_without_zone_keep_their_type_and_wall_clock_through_read_and_write(
    spark, tmp_path
):
    # Spark 3.5 would read a zone-less timestamp as an instant (4.x: TIMESTAMP_NTZ) and write it back with UTC.
    from datetime import datetime, timezone

    from deltalake import write_deltalake

    from airflow_provider_dltrain.etl import write_dataframe
    from airflow_provider_dltrain.lake import open_table

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    naive, utc = pa.timestamp("us"), pa.timestamp("us", tz="UTC")
    when = datetime(2026, 11, 28, 9, 30)
    write_deltalake(
        src,
        pa.table(
            {
                "id": [1],
                "local": pa.array([when], naive),
                "instant": pa.array([when.replace(tzinfo=timezone.utc)], utc),
            }
        ),
    )
    df = read_delta(spark, latest(src))
    assert dict(df.dtypes) == {"id": "bigint", "local": "timestamp_ntz", "instant": "timestamp"}
    assert df.selectExpr("hour(local) AS h").collect()[0].h == 9
    write_dataframe(df, dst, {"ds": "2026-11-28"})
    written = open_table(dst).to_pyarrow_table()
    assert written.schema.field("local").type == naive and written.schema.field("instant").type == utc
    assert written.column("local").to_pylist() == [when]


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ([["ds", "like", "a%"]], "operator 'like'"),
        ([["ds", "=", {"x": 1}]], "the value for 'ds'"),
        ([["ds", "in", "a"]], "needs a list"),
    ],
)
def test_a_filter_delta_rs_cannot_take_is_refused_naming_the_input(spark, tmp_path, filters, needle):
    uri = _table(tmp_path)
    inputs = {"prev": {**latest(uri).to_dict(), "filters": filters}}
    with pytest.raises(InvalidSpecError, match=r"inputs\['prev'\]\.filters") as err:
        read_inputs(spark, inputs)
    assert needle in str(err.value)


def test_the_operator_refuses_a_bad_filter_without_retry_before_any_spark_job(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started before the filters were checked")

    monkeypatch.setattr("airflow_provider_dltrain.etl.spark_session", no_spark)
    uri = _table(tmp_path)
    op = SparkToDeltaOperator(
        task_id="etl",
        table_uri=str(tmp_path / "out"),
        partition={"ds": "a"},
        transform=lambda spark, frames, params: frames["prev"],
        inputs={"prev": {**latest(uri).to_dict(), "filters": [["ds", "LIKE", "a%"]]}},
    )
    with pytest.raises(AirflowFailException, match=r"inputs\['prev'\]\.filters.*'like'"):
        op.execute({})


def test_a_column_mapped_table_is_refused_naming_table_version_and_feature(spark, tmp_path):
    uri = _table(tmp_path)
    enable_column_mapping(uri)
    ref = latest(uri)
    with pytest.raises(SchemaMismatchError, match=r"version 1 uses Delta reader feature.*columnMapping"):
        read_delta(spark, ref)
