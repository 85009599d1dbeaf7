"""Spark's Python workers of a local session import PySpark from the installed package, not its zips."""

from __future__ import annotations

import os
import sys

import pyspark

from airflow_provider_dltrain.spark_daemon import own_zips

SPARK_HOME = os.path.dirname(pyspark.__file__)  # a pip-installed PySpark is its own SPARK_HOME
ZIPS = [
    os.path.join(SPARK_HOME, "python", "lib", name) for name in sorted(os.listdir(f"{SPARK_HOME}/python/lib"))
]


def test_the_zips_beside_the_installed_pyspark_are_dropped_and_nothing_else():
    path = [*ZIPS, "/somewhere/else.zip", *sys.path]
    assert sorted(own_zips(path, SPARK_HOME)) == ZIPS
    assert own_zips(path, None) == []


def test_the_zips_of_another_spark_home_stay(tmp_path):
    lib = tmp_path / "python" / "lib"
    lib.mkdir(parents=True)
    (lib / "pyspark.zip").write_bytes(b"")
    # the PySpark importable without them is not this SPARK_HOME's: the zips are what Spark runs
    assert own_zips([str(lib / "pyspark.zip"), *sys.path], str(tmp_path)) == []


def test_workers_of_a_local_session_import_pyspark_from_the_package(spark):
    def where(_):
        import sys

        import pyspark

        yield (
            pyspark.__file__,
            [p for p in sys.path if p.endswith(".zip") and ("pyspark" in p or "py4j" in p)],
        )

    ((module, zips),) = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert module == pyspark.__file__ and not module.endswith(".zip")
    assert zips == []


def test_udfs_created_under_worker_preload_run_in_workers_that_imported_the_modules(spark):
    from airflow_provider_dltrain.etl.spark import worker_preload

    def probe(batches):
        import os
        import sys

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict(
                {"preloaded": ["tabnanny" in sys.modules], "daemon": [os.getppid()]}
            )

    df = spark.range(1)
    with worker_preload(spark, ("tabnanny",)):
        preloaded = df.mapInArrow(probe, "preloaded boolean, daemon long")
    plain = df.mapInArrow(probe, "preloaded boolean, daemon long")
    ((with_module, its_daemon),) = preloaded.collect()
    ((without, other_daemon),) = plain.collect()
    assert with_module and not without
    assert its_daemon != other_daemon  # a daemon, and a pool of workers, of their own
    assert "DLTRAIN_SPARK_WORKER_PRELOAD" not in spark.sparkContext.environment
