"""ETL throughput: rows/s committed into Delta by the writer ÷ Spark writing plain Parquet of the same DataFrame."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

ROWS = 1_000_000
REPEATS = 3


def _frame(spark):
    from pyspark.sql import functions as F

    df = spark.range(ROWS, numPartitions=4).select(
        F.col("id"),
        F.array(*[(F.col("id") % (i + 7)).cast("float") / 7.0 for i in range(32)]).alias("features"),
        (F.col("id") % 10).alias("label"),
        F.concat(F.lit("2026-11-24/images/img_"), F.col("id").cast("string"), F.lit(".png")).alias(
            "source_file"
        ),
    )
    return df.cache()


def run() -> list[dict]:
    from airflow_provider_dltrain.etl import spark_session, write_dataframe

    spark = spark_session(app_name="bench-etl")
    df = _frame(spark)
    df.count()
    root = tempfile.mkdtemp(prefix="bench-etl-")
    delta_times, parquet_times = [], []
    try:
        for i in range(REPEATS):
            started = time.perf_counter()
            df.write.mode("overwrite").parquet(f"{root}/plain-{i}")
            parquet_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            write_dataframe(df, f"{root}/delta", {"ds": f"2026-11-{i + 1:02d}"})
            delta_times.append(time.perf_counter() - started)
    finally:
        df.unpersist()
        shutil.rmtree(root, ignore_errors=True)
    delta_rate = ROWS / statistics.median(delta_times)
    parquet_rate = ROWS / statistics.median(parquet_times)
    return [
        {
            "name": "ETL rows/s into Delta / Spark plain Parquet",
            "ratio": delta_rate / parquet_rate,
            "goal": ">= 0.8",
            "detail": f"(delta {delta_rate:,.0f} rows/s, parquet {parquet_rate:,.0f} rows/s, {ROWS:,} rows x {REPEATS})",
        }
    ]
