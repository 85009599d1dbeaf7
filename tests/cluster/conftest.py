"""A Spark standalone cluster (master + 2 one-core workers on 127.0.0.1) and a Spark session on it.

The suite shares one process-wide Spark session (``spark`` is ``local[2]``). A process holds one
SparkContext at a time, so ``cluster_spark`` stops whatever session is active, starts one on the
cluster, and stops it after the last test of this package; ``spark_session()`` then starts a fresh
local one. The session fixture ``spark`` would still hold the stopped object, so the tests of this
package run last in any selection (``pytest_collection_modifyitems`` below).

The cluster's two one-core workers are all ``cluster_spark``'s application holds while it lives, so
an application another process submits (``engine="spark_submit"``) would get no executor and wait
forever: this package's tests that do not use ``cluster_spark`` run before those that do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.spark_cluster import SparkCluster
from tests.support.spark_cluster import spark_cluster as start_spark_cluster

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
# importable here and in the executors' Python workers: the training functions and inference helpers
HELPERS = [str(TESTS / "training"), str(TESTS / "inference")]
for _path in HELPERS:
    if _path not in sys.path:
        sys.path.insert(0, _path)

# One barrier stage attempt: a failing rank must fail the test run at once, not after 4 retries.
CLUSTER_CONF = {
    "spark.stage.maxConsecutiveAttempts": "1",
    "spark.task.maxFailures": "1",
    "spark.executor.memory": "768m",
}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Run this package's tests after all others: they stop the session the ``spark`` fixture holds.

    Within the package, those without ``cluster_spark`` first: its application holds every core.
    """
    here = Path(__file__).parent

    def key(item: pytest.Item) -> tuple[bool, bool]:
        ours = here in Path(str(item.path)).parents
        return ours, ours and "cluster_spark" in getattr(item, "fixturenames", ())

    items.sort(key=key)


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    """A running standalone cluster with two workers of one core each (master URL, web UI, work dir)."""
    with start_spark_cluster(
        tmp_path_factory.mktemp("spark-cluster"),
        workers=2,
        cores=1,
        memory="1g",
        pythonpath=[str(REPO), *HELPERS],
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_cluster(standalone_cluster: SparkCluster) -> str:
    """The master URL of :func:`standalone_cluster`."""
    return standalone_cluster.master_url


@pytest.fixture(scope="package")
def cluster_spark(spark_cluster: str) -> Iterator[object]:
    """A Spark session on the cluster, in place of any active one; stopped after this package."""
    from pyspark.sql import SparkSession

    from airflow_provider_dltrain.etl.spark import spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = spark_session(master=spark_cluster, app_name="dltrain-cluster-tests", conf=CLUSTER_CONF)
    assert session.sparkContext.master == spark_cluster
    try:
        yield session
    finally:
        session.stop()
