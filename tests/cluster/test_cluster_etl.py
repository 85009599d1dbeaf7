"""ETL writes from a Spark standalone cluster: executors in other JVMs write the files, the driver commits."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.etl import write_dataframe

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DS = "2026-11-28"


def _rows(spark):
    # computed by the executors: 4 partitions over the two one-core workers
    return spark.range(0, 400, numPartitions=4).selectExpr(
        "id", "cast(id % 10 as int) as label", "concat('row-', cast(id as string)) as name"
    )


def test_a_cluster_computed_dataframe_lands_once_and_a_rewrite_of_the_same_rows_commits_nothing(
    cluster_spark, tmp_path
):
    uri = str(tmp_path / "numbers")
    first = write_dataframe(_rows(cluster_spark), uri, {"ds": DS})
    assert first.committed and first.rows_written == 400 and first.ref.version == 0

    rows = lake.open_table(uri).to_pyarrow_table().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == list(range(400))
    assert all(r["label"] == r["id"] % 10 and r["name"] == f"row-{r['id']}" and r["ds"] == DS for r in rows)

    again = write_dataframe(_rows(cluster_spark), uri, {"ds": DS})
    assert not again.committed and again.ref.version == first.ref.version
    assert lake.DeltaLog(uri).latest_version() == 0
    executors = cluster_spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    assert executors == 2
