"""Print, as JSON, the task states and return values of the newest run of a DAG for a date.

Run as ``python -m airflow_provider_dltrain.demo.xcoms DAG_ID YYYY-MM-DD`` inside the demo's Airflow
environment (it reads the metadata database, which only the demo driver — never a task — does).
"""

from __future__ import annotations

import json
import sys
from datetime import date
from typing import Any


def run_outcome(dag_id: str, ds: str) -> dict:
    """The newest run of ``dag_id`` whose data interval starts at ``ds`` (``{}`` when there is none).

    Adds ``report``: what :mod:`~airflow_provider_dltrain.backfill_report` says of it (reproduced or
    changed, and what changed).
    """
    from airflow_provider_dltrain.backfill_report import explain
    from airflow_provider_dltrain.backfill_runs import run_outcomes

    day = date.fromisoformat(ds)
    runs = run_outcomes(dag_id, day, day).get(ds, [])
    if not runs:
        return {}
    outcome = dict(runs[-1])
    try:
        outcome["report"] = explain(dag_id, ds, runs, _tracking()).to_dict()
    except Exception as err:  # the report is a summary: a lookup that fails must not fail the run
        outcome["report"] = {"verdict": "unknown", "changes": [f"no report: {type(err).__name__}: {err}"]}
    return outcome


def _tracking() -> Any:
    from airflow_provider_dltrain.commands.champion import NoStoreError, cli_tracking

    try:
        return cli_tracking()
    except NoStoreError:  # a DAG that never used MLflow
        return None


if __name__ == "__main__":
    print(json.dumps(run_outcome(sys.argv[1], sys.argv[2]), default=str))
