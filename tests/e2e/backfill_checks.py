"""What a backfill of the demo DAGs must give, shared by the REST and the browser backfill tests.

``snapshot`` records everything a re-run of unchanged inputs must leave alone (the predictions of
each date, the Delta versions of both tables, the registered model versions and the champions);
``assert_reran_and_reproduced`` checks that the re-run really ran, trained nothing and changed none
of it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from airflow_provider_dltrain import lake
from tests.e2e.airflow_services import AirflowApi

MODEL = "dltrain_digits"


def create_backfill(
    api: AirflowApi, dag_id: str, dates: list[str], conf: dict | None = None, reprocess: str = "failed"
) -> int:
    """``POST /api/v2/backfills`` (the call the UI's backfill form makes); returns the backfill id.

    ``failed`` is the form's "Missing and Errored Runs": Airflow refuses "Missing Runs" (``none``) for
    a DAG with ``depends_on_past`` tasks, as the retrain DAG's ``train`` is."""
    body = {
        "dag_id": dag_id,
        "from_date": f"{dates[0]}T00:00:00Z",
        "to_date": f"{dates[-1]}T00:00:00Z",
        "reprocess_behavior": reprocess,
        "max_active_runs": 1,
        "dag_run_conf": conf or {},
    }
    # On SQLite the api-server can answer 503 while the scheduler holds the DB lock - sometimes after
    # it created the backfill. A user would look at the backfills before pressing the button again:
    # a backfill of these dates created since the first press is the one we asked for, running (a
    # second press would get 409 "already a running backfill") or already finished.
    earlier = backfill_ids(api, dag_id)
    for attempt in range(10):
        try:
            return int(api.call("POST", "/api/v2/backfills", body)["id"])
        except AssertionError as err:
            if "-> 409" not in str(err) and "-> 503" not in str(err):
                raise
            span = (dates[0], dates[-1])
            mine = [
                b
                for b in new_backfills(api, dag_id, earlier)
                if (b["from_date"][:10], b["to_date"][:10]) == span
            ]
            if mine:
                return int(mine[0]["id"])
            if attempt == 9:
                raise
            time.sleep(3)
    raise AssertionError("unreachable")


def backfill_ids(api: AirflowApi, dag_id: str) -> set[int]:
    """The ids of every backfill of ``dag_id``, finished or not."""
    return {int(b["id"]) for b in new_backfills(api, dag_id, set())}


def new_backfills(api: AirflowApi, dag_id: str, before: set[int]) -> list[dict]:
    """The backfills of ``dag_id`` whose ids are not in ``before``, finished or not."""
    listed = api.call("GET", f"/api/v2/backfills?dag_id={dag_id}")["backfills"]
    return [b for b in listed if int(b["id"]) not in before]


def the_new_backfill(api: AirflowApi, dag_id: str, before: set[int]) -> dict:
    """The one backfill of ``dag_id`` created since ``before`` was listed: a UI click creates exactly
    one, which may already have finished by now (a re-run whose tasks all skip takes seconds)."""
    created = new_backfills(api, dag_id, before)
    assert len(created) == 1, f"expected one new backfill of {dag_id}, got {created}"
    return created[0]


def partition_rows(uri: str, ds: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """The rows of partition ``ds`` of a Delta table, as sorted JSON lines."""
    import pyarrow.dataset as pads

    table = lake.open_table(uri, storage_options=storage_options)
    table = table.to_pyarrow_dataset().to_table(filter=pads.field("ds") == ds)
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def snapshot(
    dates: list[str], tracking_uri: str | None = None, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """Predictions per date, table versions, model versions and champions of the demo's lake
    (``$DLTRAIN_LAKE_URI``, else under ``$DLTRAIN_HOME``)."""
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.registry import champion_as_of
    from airflow_provider_dltrain.store.config import TrackingConfig

    tracking = TrackingConfig(tracking_uri=tracking_uri or paths.mlflow_uri())
    client = tracking.client()
    predictions = paths.table("digit_predictions")
    return {
        "predictions": {ds: partition_rows(predictions, ds, storage_options) for ds in dates},
        "table_versions": {
            name: lake.open_table(paths.table(name), storage_options=storage_options).version()
            for name in ("digits", "digit_predictions")
        },
        "model_versions": sorted(int(v.version) for v in client.search_model_versions(f"name='{MODEL}'")),
        "live_champion": client.get_model_version_by_alias(MODEL, "champion").version,
        "champions": {ds: champion_as_of(tracking, MODEL, ds).version for ds in dates},
    }


def assert_reran_and_reproduced(
    api: AirflowApi,
    runs: list[dict],
    dates: list[str],
    before: dict[str, Any],
    tracking_uri: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Every run of ``dates`` succeeded with ``train`` skipped, and ``snapshot`` is unchanged."""
    assert {r["state"] for r in runs} == {"success"}, runs
    for ds in dates:
        (run,) = [r for r in runs if r["data_interval_start"][:10] == ds]
        train = api.call(
            "GET", f"/api/v2/dags/dltrain_retrain/dagRuns/{run['dag_run_id']}/taskInstances/train"
        )
        assert train["state"] == "skipped", (ds, train)  # it really ran again, and found nothing to retrain
    # every date of the snapshot, not only the re-run ones
    after = snapshot(list(before["predictions"]), tracking_uri, storage_options)
    for key in before:
        assert after[key] == before[key], f"the re-run changed {key}"
