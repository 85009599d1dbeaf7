"""Short-lived Spark JVMs on small data: JVM options, and a class-data-sharing archive of a session.

The demo and the tests start Spark JVMs that live seconds to minutes on small data; each spends most
of its start loading and verifying the same few thousand classes, and compiling with C2 what it will
not run long enough to need. :func:`jvm_options` gives them the C1 JIT alone, the serial GC and,
when it exists, this venv's class-data-sharing archive (``-XX:SharedArchiveFile``): a local session
then starts in about 3 s instead of 6.5 s. ``make install`` writes the archive once per venv:

    python -m airflow_provider_dltrain.demo.spark_cds ARCHIVE

It belongs to this venv's Spark jars and this JDK: a JVM with another class path (Spark 3.5's venv, a
standalone master) ignores it, silently. Long jobs on big data want the JVM's defaults instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

WORKLOAD = """
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())

@pandas_udf("double")
def twice(x: pd.Series) -> pd.Series:
    return x * 2.0

df = spark.range(1000).selectExpr("id", "cast(id as double) as x", "cast(id % 7 as string) as k")
df.select(twice("x")).count()
df.mapInArrow(lambda batches: batches, df.schema).groupBy("k").count().collect()
spark.createDataFrame(df.toPandas()).write.mode("overwrite").parquet(__import__("sys").argv[1])
spark.stop()
"""


# the C1 JIT alone and the serial GC: what a JVM living seconds to minutes on small data wants
SMALL_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def archive_path() -> Path:
    """Where ``make install`` writes this venv's archive."""
    return Path(sys.prefix) / "spark-cds.jsa"


def jvm_options() -> str:
    """``JAVA_TOOL_OPTIONS`` for short-lived Spark JVMs on small data (see the module's text)."""
    options = SMALL_JVM
    archive = archive_path()
    if archive.is_file():
        options += f" -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    return options


def main(archive: str) -> int:
    target = Path(archive).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = {
        **os.environ,
        "JAVA_TOOL_OPTIONS": f"{SMALL_JVM} -XX:ArchiveClassesAtExit={partial}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    scratch = target.parent / "spark-cds-scratch"
    for attempt in (1, 2):  # a JVM that could not start on a busy machine gets one more try
        proc = subprocess.run([sys.executable, "-c", WORKLOAD, str(scratch)], env=env, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
        if proc.returncode == 0 and partial.is_file() and partial.stat().st_size > 0:
            break
        why = (proc.stderr or b"").decode(errors="replace").strip().splitlines()[-5:]
        print(
            f"spark_cds: attempt {attempt} wrote no archive (exit {proc.returncode})",
            *why,
            sep="\n  ",
            file=sys.stderr,
        )
        partial.unlink(missing_ok=True)
    else:
        # only a start-up speed-up: Spark runs without it (jvm_options() leaves it out)
        print(f"spark_cds: going on without {target}; the next `make install` tries again", file=sys.stderr)
        return 0
    partial.replace(target)
    print(f"spark_cds: {target} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
