"""A real scheduler path: scheduler + dag-processor + api-server on 127.0.0.1 (LocalExecutor), a backfill
created through ``POST /api/v2/backfills`` — the call the UI's backfill dialog makes — and the tables checked.
"""

from __future__ import annotations

import json
import os
import time
from datetime import date, timedelta

import pytest

from airflow_provider_dltrain import lake
from tests.e2e.airflow_services import airflow_services, wait_for_backfill, wait_for_dag

pytestmark = pytest.mark.slow

START = date(2026, 11, 24)
DATES = [(START + timedelta(days=i)).isoformat() for i in range(3)]
MODEL = "dltrain_digits"
FAST = {"epochs": 5, "batch_size": 32, "lr": 0.003, "seed": 7}


def _backfill(api, dag_id, dates, conf=None, reprocess="none"):
    body = {
        "dag_id": dag_id,
        "from_date": f"{dates[0]}T00:00:00Z",
        "to_date": f"{dates[-1]}T00:00:00Z",
        "reprocess_behavior": reprocess,
        "max_active_runs": 1,
        "dag_run_conf": conf or {},
    }
    # On SQLite the api-server can answer 503 while the scheduler holds the DB lock - sometimes after
    # it created the backfill. A user would press the button again; the second press then gets 409
    # "already a running backfill", and that running backfill (same dates) is the one we asked for.
    for attempt in range(10):
        try:
            return api.call("POST", "/api/v2/backfills", body)["id"]
        except AssertionError as err:
            if "-> 409" in str(err):
                mine = _running_backfill(api, body)
                if mine is not None:
                    return mine
            elif "-> 503" not in str(err):
                raise
            if attempt == 9:
                raise
            time.sleep(3)
    raise AssertionError("unreachable")


def _running_backfill(api, body):
    listed = api.call("GET", f"/api/v2/backfills?dag_id={body['dag_id']}")["backfills"]
    for b in listed:
        same = b["from_date"][:10] == body["from_date"][:10] and b["to_date"][:10] == body["to_date"][:10]
        if same and not b.get("completed_at"):
            return b["id"]
    return None


def _partition_rows(uri, ds):
    import pyarrow.dataset as pads

    table = lake.open_table(uri).to_pyarrow_dataset().to_table(filter=pads.field("ds") == ds)
    return sorted(json.dumps(r, sort_keys=True) for r in table.to_pylist())


def test_backfill_created_through_the_rest_api_runs_and_reproduces(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env
    from airflow_provider_dltrain.demo.seed import seed
    from airflow_provider_dltrain.registry import champion_as_of
    from airflow_provider_dltrain.registry.config import TrackingConfig

    seed(paths.landing(), START, len(DATES), per_day=150)
    env = airflow_env()
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"  # only the backfills create runs
    with airflow_services(tmp_path / "airflow", env, tmp_path / "service-logs") as api:
        for dag_id in ("dltrain_ingest", "dltrain_retrain"):
            wait_for_dag(api, dag_id)
            api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        ingest = _backfill(api, "dltrain_ingest", DATES)
        runs = wait_for_backfill(api, ingest, "dltrain_ingest", len(DATES), timeout=600)
        assert {r["state"] for r in runs} == {"success"}, runs
        retrain = _backfill(api, "dltrain_retrain", DATES, conf={"hparams": FAST})
        runs = wait_for_backfill(api, retrain, "dltrain_retrain", len(DATES), timeout=900)
        assert {r["state"] for r in runs} == {"success"}, runs
        assert sorted(r["data_interval_start"][:10] for r in runs) == DATES

        predictions = paths.table("digit_predictions")
        first = {ds: _partition_rows(predictions, ds) for ds in DATES}
        for ds in DATES:
            rows = [json.loads(r) for r in first[ds]]
            assert len(rows) == 150 and len({r["source_file"] for r in rows}) == 150
        tracking = TrackingConfig(tracking_uri=paths.mlflow_uri())
        client = tracking.client()
        versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{MODEL}'"))
        live = client.get_model_version_by_alias(MODEL, "champion").version
        champions = {ds: champion_as_of(tracking, MODEL, ds).version for ds in DATES}

        # Re-process the middle date as a user would from the UI: same answer, nothing new.
        again = _backfill(api, "dltrain_retrain", DATES[1:2], conf={"hparams": FAST}, reprocess="completed")
        runs = wait_for_backfill(api, again, "dltrain_retrain", len(DATES), timeout=600)
        assert {r["state"] for r in runs} == {"success"}, runs
        (middle,) = [r for r in runs if r["data_interval_start"][:10] == DATES[1]]
        train = api.call(
            "GET", f"/api/v2/dags/dltrain_retrain/dagRuns/{middle['dag_run_id']}/taskInstances/train"
        )
        assert train["state"] == "skipped"  # it really ran again, and found nothing to retrain
        assert {ds: _partition_rows(predictions, ds) for ds in DATES} == first
        assert sorted(int(v.version) for v in client.search_model_versions(f"name='{MODEL}'")) == versions
        assert client.get_model_version_by_alias(MODEL, "champion").version == live
        assert {ds: champion_as_of(tracking, MODEL, ds).version for ds in DATES} == champions
    assert os.path.exists(tmp_path / "service-logs" / "scheduler.log")
