"""Spark ETL writes are content-idempotent: re-running a date with the same rows commits nothing."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.etl import read_inputs, write_dataframe
from airflow_provider_dltrain.exceptions import BadDataError, InvalidSpecError

DS = "2026-11-24"
N = 200


def _frame(spark, partitions=4, n=N, bad_every=0):
    from pyspark.sql import functions as F

    df = spark.range(n, numPartitions=partitions).select(
        F.col("id"),
        F.array(*[(F.col("id") * k).cast("float") for k in range(4)]).alias("features"),
        F.concat(F.lit("file-"), F.col("id").cast("string")).alias("source_file"),
    )
    if bad_every:
        error = F.when(F.col("id") % bad_every == 0, F.lit("unreadable")).otherwise(
            F.lit(None).cast("string")
        )
        df = df.withColumn("_error", error)
    return df


def _files(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_rerun_with_the_same_rows_in_other_spark_partitions_commits_nothing(spark, tmp_path):
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    first = write_dataframe(_frame(spark), uri, {"ds": DS})
    assert first.committed and first.digest and first.to_dict()["committed"] is True
    files = _files(os.path.join(uri, f"ds={DS}"))
    for again in (_frame(spark, partitions=1), _frame(spark, partitions=3).orderBy(F.rand(7)).repartition(5)):
        result = write_dataframe(again, uri, {"ds": DS})
        assert (result.committed, result.ref, result.digest) == (False, first.ref, first.digest)
        assert result.to_dict()["committed"] is False and result.rows_written == N
    assert lake.latest(uri).version == first.ref.version == 0
    assert _files(os.path.join(uri, f"ds={DS}")) == files


def test_one_changed_value_or_one_more_row_commits_a_new_version(spark, tmp_path):
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    write_dataframe(_frame(spark), uri, {"ds": DS})
    changed = _frame(spark).withColumn(
        "source_file", F.when(F.col("id") == 7, F.lit("renamed")).otherwise(F.col("source_file"))
    )
    assert write_dataframe(changed, uri, {"ds": DS}).ref.version == 1
    longer = write_dataframe(_frame(spark, n=N + 1), uri, {"ds": DS})
    assert longer.committed and longer.ref.version == 2


def test_a_partition_written_before_digests_existed_is_not_rewritten_by_the_same_rows(spark, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    legacy = pa.table(
        {
            "id": pa.array(range(N), pa.int64()),
            "features": pa.array(
                [[float(i * k) for k in range(4)] for i in range(N)], pa.list_(pa.float32())
            ),
            "source_file": [f"file-{i}" for i in range(N)],
            "ds": [DS] * N,
        }
    )
    write_deltalake(uri, legacy, partition_by=["ds"])
    result = write_dataframe(_frame(spark), uri, {"ds": DS})
    assert not result.committed and result.ref.version == 0 == lake.latest(uri).version


def test_rerun_with_the_same_bad_rows_leaves_the_quarantine_version_alone(spark, tmp_path):
    uri = str(tmp_path / "t")
    first = write_dataframe(_frame(spark, bad_every=10), uri, {"ds": DS}, max_bad_fraction=0.2)
    assert first.quarantine_committed and first.rows_quarantined == N // 10
    again = write_dataframe(_frame(spark, partitions=2, bad_every=10), uri, {"ds": DS}, max_bad_fraction=0.2)
    assert (again.committed, again.quarantine_committed) == (False, False)
    assert again.quarantine_ref == first.quarantine_ref
    assert lake.latest(f"{uri}_quarantine").version == 0
    fixed = write_dataframe(_frame(spark, bad_every=20), uri, {"ds": DS}, max_bad_fraction=0.2)
    assert fixed.quarantine_committed and fixed.quarantine_ref.version == 1


def test_the_demo_etl_run_twice_commits_nothing_the_second_time(spark, tmp_path):
    from airflow_provider_dltrain.demo.digits_etl import decode_digits
    from airflow_provider_dltrain.demo.seed import seed_day

    landing = str(tmp_path / "landing")
    seed_day(landing, DS, per_day=30)
    specs = {
        "images": {
            "path": f"{landing}/{DS}/images",
            "format": "binaryFile",
            "options": {"pathGlobFilter": "*.png"},
        },
        "labels": {"path": f"{landing}/{DS}/labels.csv", "format": "csv"},
    }
    uri = str(tmp_path / "digits")
    runs = [
        write_dataframe(
            decode_digits(spark, read_inputs(spark, specs), {}), uri, {"ds": DS}, max_bad_fraction=0.2
        )
        for _ in range(2)
    ]
    assert runs[0].committed and runs[0].quarantine_committed
    assert (runs[1].committed, runs[1].quarantine_committed) == (False, False)
    reasons = {r["reason"] for r in lake.open_table(f"{uri}_quarantine").to_pyarrow_table().to_pylist()}
    assert not any("0x" in reason for reason in reasons), reasons


def test_an_empty_write_into_an_absent_partition_commits_nothing(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(_frame(spark), uri, {"ds": DS})
    result = write_dataframe(_frame(spark).limit(0), uri, {"ds": "2026-11-25"}, allow_empty=True)
    assert not result.committed and lake.latest(uri).version == 0
    assert not os.path.exists(os.path.join(uri, "ds=2026-11-25"))


def test_a_refused_write_leaves_no_empty_partition_directory(spark, tmp_path):
    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    with pytest.raises(BadDataError, match="max_bad_fraction"):
        write_dataframe(_frame(spark, bad_every=2), uri, {"ds": DS})
    assert not os.path.exists(uri) and not os.path.exists(f"{uri}_quarantine")

    write_dataframe(_frame(spark), uri, {"ds": "2026-11-23"})
    with pytest.raises(BadDataError):
        write_dataframe(_frame(spark, bad_every=2), uri, {"ds": DS})
    wrong = _frame(spark).withColumn("ds", F.when(F.col("id") == 3, F.lit("2026-11-30")).otherwise(F.lit(DS)))
    with pytest.raises(InvalidSpecError, match="partition column value"):
        write_dataframe(wrong, uri, {"ds": DS})
    assert not os.path.exists(os.path.join(uri, f"ds={DS}"))
    assert not os.path.exists(f"{uri}_quarantine")
    assert set(_files(uri)) == {"_delta_log", "_dltrain_history", "ds=2026-11-23"}
