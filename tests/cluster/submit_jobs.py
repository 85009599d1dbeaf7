"""A transform the spark_submit tests ship in the job's code bundle (a top-level module, like etl_jobs).

``double_with_origin`` is ``etl_jobs.double`` plus ``origin``: where the cluster's executors imported
this provider from, computed by a Python UDF on them. The workers' own ``PYTHONPATH`` holds the
checkout too, so ``origin`` ending in the bundle's ``.zip`` shows the job's ``addPyFile`` put the staged
code first on the executors' path (the driver puts it first on its own).
"""

from __future__ import annotations

import time


def _provider_origin(_: object) -> str:
    import airflow_provider_dltrain

    return str(airflow_provider_dltrain.__file__)


def double_with_origin(spark, inputs, params):
    from pyspark.sql import functions as F

    time.sleep(float(params.get("seconds", 0)))
    df = inputs["raw"]
    origin = F.udf(_provider_origin, "string")
    return df.select(
        F.col("id").cast("long").alias("id"),
        (F.col("x").cast("double") * 2).alias("x2"),
        origin(F.col("id")).alias("origin"),
    )
