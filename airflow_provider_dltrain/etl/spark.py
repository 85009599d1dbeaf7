"""Local Spark sessions: ``local[*]``, Arrow on, nothing fetched from the network."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import require

_LOCK = threading.Lock()
log = logging.getLogger(__name__)

# Settings every session gets. Timestamps as INT64 micros (never INT96) so the Parquet files Spark
# executors write are valid Delta data files; no Ivy/Maven resolution can be triggered.
BASE_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.jars.ivy": "/nonexistent-no-downloads",
    "spark.sql.warehouse.dir": os.path.join(os.environ.get("DLTRAIN_HOME", ".dltrain"), "spark-warehouse"),
    "spark.python.worker.reuse": "true",
    # Delta partition directories hold strings ("ds=2026-11-28"); never let Spark turn them into dates.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}

# Spark's setting naming the module its Python worker daemon runs (see spark_daemon.py)
DAEMON_MODULE = "spark.python.daemon.module"
_LOCAL_ONLY = ("spark.driver.bindAddress", "spark.driver.host", "spark.sql.warehouse.dir")


def launched_by_spark_submit() -> bool:
    """True inside a driver that ``spark-submit`` (or Glue, EMR) started: it already chose the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None = None,
    app_name: str = "dltrain",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Return the active local Spark session, creating it when needed.

    :param master: Spark master; default ``$DLTRAIN_SPARK_MASTER`` or ``local[*]``, or in a driver
        that spark-submit started, the master and application name it was given.
    :param conf: extra Spark settings (they win over the defaults).
    """
    require("pyspark", "spark")
    from pyspark.sql import SparkSession

    # Workers must run this interpreter: the system Python lacks pyarrow and this package.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with _LOCK:
        active = _existing(SparkSession)
        if active is not None:
            return active
        started = time.monotonic()
        base = dict(BASE_CONF)
        builder = SparkSession.builder
        if master is None and launched_by_spark_submit():
            # spark-submit, Glue, EMR and EMR Serverless set the master and the application's name
            # (``--name``: what the cluster's UI lists); a builder setting would override both, and
            # $DLTRAIN_SPARK_MASTER (the Airflow worker's in-process default, inherited by the
            # spark-submit it starts) would turn a cluster job into a local one. Executors on other
            # machines must reach the driver, so it must not bind to loopback either.
            for key in _LOCAL_ONLY:
                base.pop(key)
        else:
            chosen = master or os.environ.get("DLTRAIN_SPARK_MASTER") or "local[*]"
            builder = builder.master(chosen).appName(app_name)
            if chosen.startswith("local") and not _from_code_bundle():
                # workers on this machine import PySpark's compiled package instead of its zips
                base[DAEMON_MODULE] = "airflow_provider_dltrain.spark_daemon"
        for key, value in {**base, **dict(conf or {})}.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel(os.environ.get("DLTRAIN_SPARK_LOG_LEVEL", "WARN"))
        log.info("Spark session %s started in %.1fs", session.sparkContext.master, time.monotonic() - started)
        return session


def _from_code_bundle() -> bool:
    """This package was imported from a job's code bundle (a zip on ``sys.path``), not installed.

    Spark starts its Python worker daemon from the environment, not from this process's ``sys.path``:
    in a job image without the provider installed (Glue, EMR, a container), the daemon module would
    not be importable and every task would fail; PySpark's own daemon is used there instead.
    """
    return f".zip{os.sep}" in (__file__ or "")


@contextlib.contextmanager
def worker_preload(spark: Any, modules: tuple[str, ...]) -> Iterator[None]:
    """Python UDFs created in the block run in workers that imported ``modules`` before they started.

    PySpark copies ``SparkContext.environment`` into each UDF it creates; Spark keeps one worker
    daemon per set of those variables, and on a local master that daemon is
    :mod:`airflow_provider_dltrain.spark_daemon`, which imports the modules once and forks its workers
    with them. Elsewhere the variable is only set in the workers' environment.
    """
    from airflow_provider_dltrain.spark_daemon import PRELOAD_ENV

    environment = spark.sparkContext.environment
    before = environment.get(PRELOAD_ENV)
    environment[PRELOAD_ENV] = ",".join(modules)
    try:
        yield
    finally:
        if before is None:
            environment.pop(PRELOAD_ENV, None)
        else:
            environment[PRELOAD_ENV] = before


def _existing(session_class: Any) -> Any:
    """This thread's active session, else the default one another thread started (``None``: none)."""
    active = session_class.getActiveSession()  # the JVM keeps the active session per thread
    if active is None and hasattr(session_class, "active"):  # PySpark >= 3.5
        try:
            active = session_class.active()
        except Exception:  # NO_ACTIVE_OR_DEFAULT_SESSION
            return None
    return active


def to_arrow_schema(spark_schema: Any) -> Any:
    """Arrow schema of a Spark ``StructType``; timestamps (UTC instants) as ``timestamp[us, tz=UTC]``.

    Spark 4 takes the zone as ``timezone=`` (no zone without it); Spark 3.5's function has no such
    argument and always uses UTC, so the result is the same on both.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema as convert

    if "timezone" in inspect.signature(convert).parameters:
        return convert(spark_schema, timezone="UTC")
    return convert(spark_schema)


def from_arrow_schema(arrow_schema: Any) -> Any:
    """Spark ``StructType`` of an Arrow schema; timestamps without a zone become ``TIMESTAMP_NTZ``.

    Said explicitly because the default differs: Spark 4 maps them to ``TIMESTAMP_NTZ``, Spark 3.5 to
    ``TIMESTAMP`` (an instant in the session zone), which would shift wall-clock values.
    """
    from pyspark.sql.pandas.types import from_arrow_schema as convert

    return convert(arrow_schema, prefer_timestamp_ntz=True)
