"""A transform for the unchanged re-run tests (importable by name, with a source file to hash)."""

from __future__ import annotations


def scaled(spark, inputs, params):
    from pyspark.sql import functions as F

    df = inputs["raw"]
    factor = float(params.get("factor", 1))
    return df.select(F.col("id").cast("long").alias("id"), (F.col("x").cast("double") * factor).alias("x"))
