from __future__ import annotations

import os
from datetime import date

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.demo.digits_etl import decode_digits
from airflow_provider_dltrain.demo.seed import seed_day
from airflow_provider_dltrain.etl import read_delta, read_inputs, write_dataframe
from airflow_provider_dltrain.exceptions import BadDataError, SchemaMismatchError

DS = "2026-11-24"


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("landing"))
    seed_day(root, DS, per_day=60)
    return root


def _digits(spark, landing, ds=DS):
    inputs = read_inputs(
        spark,
        {
            "images": {
                "path": f"{landing}/{ds}/images",
                "format": "binaryFile",
                "options": {"pathGlobFilter": "*.png"},
            },
            "labels": {"path": f"{landing}/{ds}/labels.csv", "format": "csv"},
        },
    )
    return decode_digits(spark, inputs, {})


def _files_under(path):
    return sorted(
        os.path.relpath(os.path.join(d, f), path)
        for d, _, fs in os.walk(path)
        for f in fs
        if f.endswith(".parquet")
    )


def test_broken_files_land_in_quarantine_with_a_reason_and_no_good_row_is_lost(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    result = write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    assert (result.rows_written, result.rows_quarantined) == (60, 3)
    rows = lake.open_table(uri).to_pyarrow_table().to_pylist()
    assert len(rows) == 60 and {r["ds"] for r in rows} == {DS}
    assert len({r["source_file"] for r in rows}) == 60
    assert all(
        len(r["features"]) == 64 and 0.0 <= min(r["features"]) <= max(r["features"]) <= 1.0 for r in rows
    )
    bad = lake.open_table(f"{uri}_quarantine").to_pyarrow_table().to_pylist()
    reasons = {r["source_file"].rsplit("/", 1)[-1]: r["reason"] for r in bad}
    assert set(reasons) == {"bad_truncated.png", "bad_size.png", "no_label.png"}
    assert "truncated" in reasons["bad_truncated.png"]
    assert "9x9" in reasons["bad_size.png"]
    assert "missing label" in reasons["no_label.png"]
    assert all(r["ds"] == DS for r in bad)


def test_above_the_bad_row_threshold_nothing_is_committed_to_either_table(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    with pytest.raises(BadDataError, match=r"3 of 63 row\(s\).*nothing was committed"):
        write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.01)
    assert lake.DeltaLog(uri).latest_version() is None
    assert lake.DeltaLog(f"{uri}_quarantine").latest_version() is None
    assert _files_under(uri) == [] and _files_under(f"{uri}_quarantine") == []


def test_rerunning_a_date_three_times_leaves_identical_content(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    first = sorted(map(str, lake.open_table(uri).to_pyarrow_table().to_pylist()))
    for _ in range(3):
        write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    assert sorted(map(str, lake.open_table(uri).to_pyarrow_table().to_pylist())) == first
    assert lake.open_table(f"{uri}_quarantine").to_pyarrow_table().num_rows == 3


def test_schema_conflict_fails_before_writing_and_names_the_columns(spark, landing, tmp_path):
    from pyspark.sql import functions as F

    uri = str(tmp_path / "digits")
    write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    before = _files_under(uri)
    wrong = _digits(spark, landing).withColumn("label", F.col("label").cast("string"))
    with pytest.raises(SchemaMismatchError, match="label: table has int64, data has string"):
        write_dataframe(wrong, uri, {"ds": "2026-11-25"}, max_bad_fraction=0.1)
    extra = _digits(spark, landing).withColumn("weight", F.lit(1.0))
    with pytest.raises(SchemaMismatchError, match=r"\['weight'\]"):
        write_dataframe(extra, uri, {"ds": "2026-11-25"}, max_bad_fraction=0.1)
    assert _files_under(uri) == before
    assert lake.latest(uri).version == 0
    ref = write_dataframe(extra, uri, {"ds": "2026-11-25"}, max_bad_fraction=0.1, schema_mode="merge").ref
    assert "weight" in lake.open_table(uri, ref.version).schema().to_arrow().names


def test_injection_in_a_partition_value_cannot_overwrite_other_partitions(spark, landing, tmp_path):
    from airflow_provider_dltrain.exceptions import InvalidPartitionError

    uri = str(tmp_path / "digits")
    write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    with pytest.raises(InvalidPartitionError):
        write_dataframe(_digits(spark, landing), uri, {"ds": "2026-11-28' OR '1'='1"}, max_bad_fraction=0.1)
    assert lake.open_table(uri).to_pyarrow_table().num_rows == 60


def test_a_pinned_version_reads_exactly_that_versions_rows(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    v0 = write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1).ref
    write_dataframe(_digits(spark, landing), uri, {"ds": "2026-11-25"}, max_bad_fraction=0.1)
    assert read_delta(spark, v0).count() == 60
    df = read_delta(spark, lake.latest(uri))
    assert df.count() == 120
    assert {r["ds"] for r in df.select("ds").distinct().collect()} == {DS, "2026-11-25"}
    assert dict(df.dtypes)["ds"] == "string"


def test_files_written_by_spark_are_a_valid_delta_table_for_any_reader(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    table = lake.open_table(uri)
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert adds and all(a["num_records"] and a["partition.ds"] == DS for a in adds)
    assert sum(a["num_records"] for a in adds) == 60
    assert table.to_pyarrow_dataset().count_rows() == 60
    assert date.fromisoformat(DS)


def test_a_write_with_no_rows_is_refused_unless_asked_for_and_then_empties_the_partition(
    spark, landing, tmp_path
):
    uri = str(tmp_path / "digits")
    write_dataframe(_digits(spark, landing), uri, {"ds": DS}, max_bad_fraction=0.1)
    empty = _digits(spark, landing).limit(0)
    with pytest.raises(BadDataError, match="no rows"):
        write_dataframe(empty, uri, {"ds": DS})
    assert lake.open_table(uri).to_pyarrow_table().num_rows == 60
    write_dataframe(empty, uri, {"ds": DS}, allow_empty=True)
    assert lake.open_table(uri).to_pyarrow_table().num_rows == 0


def test_file_stats_are_valid_delta_stats_for_timestamps_and_non_finite_floats(spark, tmp_path):
    import json

    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    df = spark.range(3).select(
        F.col("id"),
        F.to_timestamp(F.lit("2026-11-28 10:00:00")).alias("at"),
        F.when(F.col("id") == 0, F.lit(float("inf"))).otherwise(F.lit(1.5)).alias("score"),
    )
    write_dataframe(df.coalesce(1), uri, {"ds": DS})
    log = lake.DeltaLog(uri)
    (stats,) = [json.loads(a["add"]["stats"]) for a in log.commit_actions(0) if "add" in a]
    assert stats["minValues"]["at"] == "2026-11-28T10:00:00.000Z"
    assert "score" not in stats["minValues"]
    assert lake.open_table(uri).to_pyarrow_table().num_rows == 3
