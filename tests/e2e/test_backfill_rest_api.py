"""A real scheduler path: scheduler + dag-processor + api-server on 127.0.0.1 (LocalExecutor), a backfill
created through ``POST /api/v2/backfills`` — the call the UI's backfill dialog makes — and the tables checked.
"""

from __future__ import annotations

import json
import os
from datetime import date, timedelta

import pytest

from tests.e2e.airflow_services import airflow_services, wait_for_backfill, wait_for_dag
from tests.e2e.backfill_checks import assert_reran_and_reproduced, create_backfill, snapshot

pytestmark = pytest.mark.slow

START = date(2026, 11, 24)
DATES = [(START + timedelta(days=i)).isoformat() for i in range(3)]
FAST = {"epochs": 5, "batch_size": 32, "lr": 0.003, "seed": 7}


def test_backfill_created_through_the_rest_api_runs_and_reproduces(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env
    from airflow_provider_dltrain.demo.seed import seed

    seed(paths.landing(), START, len(DATES), per_day=150)
    env = airflow_env()
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"  # only the backfills create runs
    with airflow_services(tmp_path / "airflow", env, tmp_path / "service-logs") as api:
        for dag_id in ("dltrain_ingest", "dltrain_retrain"):
            wait_for_dag(api, dag_id)
            api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        ingest = create_backfill(api, "dltrain_ingest", DATES)
        runs = wait_for_backfill(api, ingest, "dltrain_ingest", len(DATES), timeout=600)
        assert {r["state"] for r in runs} == {"success"}, runs
        retrain = create_backfill(api, "dltrain_retrain", DATES, conf={"hparams": FAST})
        runs = wait_for_backfill(api, retrain, "dltrain_retrain", len(DATES), timeout=900)
        assert {r["state"] for r in runs} == {"success"}, runs
        assert sorted(r["data_interval_start"][:10] for r in runs) == DATES

        first = snapshot(DATES)
        for ds in DATES:
            rows = [json.loads(r) for r in first["predictions"][ds]]
            assert len(rows) == 150 and len({r["source_file"] for r in rows}) == 150

        # Re-process the middle date as a user would from the UI: same answer, nothing new.
        again = create_backfill(
            api, "dltrain_retrain", DATES[1:2], conf={"hparams": FAST}, reprocess="completed"
        )
        runs = wait_for_backfill(api, again, "dltrain_retrain", len(DATES), timeout=600)
        assert_reran_and_reproduced(api, runs, DATES[1:2], first)
    assert os.path.exists(tmp_path / "service-logs" / "scheduler.log")
