from __future__ import annotations

from datetime import date

import pytest

from airflow_provider_dltrain import lake


@pytest.fixture
def demo_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db
    from airflow_provider_dltrain.demo.seed import seed

    seed(paths.landing(), date(2026, 11, 24), 1, per_day=100)
    env = airflow_env()
    ensure_airflow_db(env)
    return env


@pytest.mark.slow
def test_ingest_dag_run_for_a_date_writes_that_dates_partition_and_a_rerun_changes_nothing(demo_home):
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import run_dags

    # the run for the date, then the same run again (one runner process: Airflow and Spark start once)
    first, again = run_dags([("dltrain_ingest", "2026-11-24", None)] * 2, demo_home)
    assert first.ok, first.tail
    assert again.ok, again.tail
    written = [o.state["xcom"]["ingest_images"] for o in (first, again)]
    assert [(w["version"], w["committed"]) for w in written] == [(0, True), (0, False)]
    assert written[1]["skipped"] is True and "no Spark session or job started" in written[1]["reason"]
    assert first.state["run_id"] != again.state["run_id"]
    uri = paths.table("digits")
    table = lake.open_table(uri)
    rows = table.to_pyarrow_table().to_pylist()
    assert len(rows) == 100 and {p["ds"] for p in table.partitions()} == {"2026-11-24"}
    assert len({r["source_file"] for r in rows}) == 100  # every image once, also after the re-run
    assert lake.open_table(paths.table("digits_quarantine")).to_pyarrow_table().num_rows == 3
    info = lake.DeltaLog(uri).commit_info(table.version())
    assert info["airflow.dag_id"] == "dltrain_ingest" and info["airflow.task_id"] == "ingest_images"
    assert info["dltrain.rerun_changed"] == "first write" and '"stage":"etl"' in info["dltrain.rerun_facts"]
    assert info["airflow.run_id"] == first.state["run_id"] and info["airflow.run_id"].startswith("manual__")
    events = _asset_events(demo_home)
    # same landing files: the re-run commits nothing and its event says so, naming the same version
    assert lake.DeltaLog(uri).latest_version() == 0
    assert [e for n, e in events if n == "dltrain_digits"] == [
        {"version": 0, "partition": {"ds": "2026-11-24"}, "uri": uri, "committed": c} for c in (True, False)
    ]


def _asset_events(env):
    import json
    import subprocess
    import sys

    code = (
        "import json\n"
        "from sqlalchemy import select\n"
        "from airflow.models.asset import AssetEvent, AssetModel\n"
        "from airflow.utils.session import create_session\n"
        "with create_session() as s:\n"
        "    q = select(AssetModel.name, AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)\n"
        "    print(json.dumps([[n, e] for n, e in s.execute(q).all()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])
