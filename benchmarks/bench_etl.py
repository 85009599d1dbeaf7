"""ETL throughput: rows/s committed into Delta by the writer ÷ Spark writing plain Parquet of the same DataFrame;
and rows/s at 10x the data ÷ rows/s at 1x (the cost grows linearly: goal >= 0.9)."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

ROWS = 1_000_000
REPEATS = 3


SCALE_ROWS = 200_000  # 1x; the 10x run writes 2,000,000 rows (generated, not cached)


def _frame(spark, rows: int = ROWS, partitions: int = 4):
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=partitions).select(
        F.col("id"),
        F.array(*[(F.col("id") % (i + 7)).cast("float") / 7.0 for i in range(32)]).alias("features"),
        (F.col("id") % 10).alias("label"),
        F.concat(F.lit("2026-11-24/images/img_"), F.col("id").cast("string"), F.lit(".png")).alias(
            "source_file"
        ),
    )
    return df


def _scaling(spark, root: str) -> dict:
    """Best of two interleaved rounds of writing 1x and 10x the rows, each into a fresh partition."""
    from airflow_provider_dltrain.etl import write_dataframe

    best: dict[int, float] = {}
    for i in range(2):
        for factor in (1, 10):
            df = _frame(spark, SCALE_ROWS * factor, 4 * factor)
            started = time.perf_counter()
            write_dataframe(df, f"{root}/scale-{factor}", {"ds": f"2026-12-{i + 1:02d}"})
            best[factor] = min(best.get(factor, float("inf")), time.perf_counter() - started)
    small, large = SCALE_ROWS / best[1], 10 * SCALE_ROWS / best[10]
    return {
        "name": "ETL rows/s at 10x the data / at 1x",
        "ratio": large / small,
        "goal": ">= 0.9",
        "detail": f"({large:,.0f} rows/s at {10 * SCALE_ROWS:,} rows vs {small:,.0f} at {SCALE_ROWS:,}, best of 2)",
    }


def run() -> list[dict]:
    from airflow_provider_dltrain.etl import spark_session, write_dataframe

    spark = spark_session(app_name="bench-etl")
    df = _frame(spark).cache()
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
        scaling = _scaling(spark, root)
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
        },
        scaling,
    ]
