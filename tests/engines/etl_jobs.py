"""Transforms the cloud-engine tests ship to their jobs (staged as a module in the code bundle)."""

from __future__ import annotations

import time


def double(spark, inputs, params):
    from pyspark.sql import functions as F

    df = inputs["raw"]
    return df.select(F.col("id").cast("long").alias("id"), (F.col("x").cast("double") * 2).alias("x2"))


def broken(spark, inputs, params):
    raise ValueError(f"transform refused the input: {params.get('why', 'boom')}")


def slow(spark, inputs, params):
    time.sleep(float(params.get("seconds", 60)))
    return double(spark, inputs, params)


def refused(spark, inputs, params):
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    raise InvalidSpecError(f"transform refused the input: {params.get('why', 'bad input')}")
