"""A whole ETL write in its own process (Spark driver + executors), for race and kill -9 tests."""

from __future__ import annotations

import sys

from airflow_provider_dltrain.etl import spark_session, write_dataframe


def main(uri: str, ds: str, n: int) -> None:
    from pyspark.sql import functions as F

    spark = spark_session(master="local[2]", app_name="writer-job")
    df = spark.range(n, numPartitions=4).select(
        F.col("id"),
        F.array(*[F.col("id").cast("float")] * 8).alias("features"),
        F.concat(F.lit("file-"), F.col("id").cast("string")).alias("source_file"),
    )
    print("WRITING", flush=True)
    result = write_dataframe(df, uri, {"ds": ds})
    print(f"COMMITTED version={result.ref.version} rows={result.rows_written}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
