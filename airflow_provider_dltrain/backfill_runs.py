"""The runs of a DAG per date, as Airflow's metadata database holds them: what the backfill report reads.

For every run whose data interval starts in a date range: its state, each task's state, each task's
return value and the cloud job each task submitted. Nothing here writes.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from typing import Any

#: The XCom key under which a task records the cloud job it submitted (``operators.engine_run``).
JOB_XCOM_KEY = "dltrain_job"


def run_outcomes(dag_id: str, start: date, end: date) -> dict[str, list[dict[str, Any]]]:
    """Every run of ``dag_id`` whose data interval starts in [start, end], oldest first, per date.

    Each run: ``run_id``, ``state``, ``tasks`` (task id → state), ``xcom`` (task id → return value),
    ``jobs`` (task id → the cloud job it submitted) and ``backfill`` (the backfill it belongs to:
    ``id``, ``completed``, ``paused``, ``max_active_runs``; None for a scheduled or manual run).
    Reads Airflow's metadata database.
    """
    from airflow.models.backfill import Backfill
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    low = datetime(start.year, start.month, start.day, tzinfo=timezone.utc)
    high = datetime(end.year, end.month, end.day, tzinfo=timezone.utc) + timedelta(days=1)
    out: dict[str, list[dict[str, Any]]] = {}
    with create_session() as session:
        runs = session.scalars(
            select(DagRun)
            .where(
                DagRun.dag_id == dag_id, DagRun.data_interval_start >= low, DagRun.data_interval_start < high
            )
            .order_by(DagRun.id)
        ).all()
        for run in runs:
            tis = session.scalars(
                select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
            ).all()
            states = {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in tis}
            # a cleared and re-run task keeps its run id: its try tells this execution's commits from older ones
            tries = {
                ti.task_id: {
                    "try_number": ti.try_number,
                    "start": ti.start_date.isoformat() if ti.start_date else None,
                }
                for ti in tis
            }
            values: dict[str, Any] = {}
            jobs: dict[str, Any] = {}
            for row in session.scalars(
                select(XComModel).where(
                    XComModel.dag_run_id == run.id, XComModel.key.in_(("return_value", JOB_XCOM_KEY))
                )
            ):
                (values if row.key == "return_value" else jobs)[row.task_id] = XComModel.deserialize_value(
                    row
                )
            if run.data_interval_start is None:  # excluded by the query; for the type checker
                continue
            ds = run.data_interval_start.date().isoformat()
            backfill = session.get(Backfill, run.backfill_id) if getattr(run, "backfill_id", None) else None
            out.setdefault(ds, []).append(
                json.loads(
                    json.dumps(
                        {
                            "run_id": run.run_id,
                            "state": str(getattr(run.state, "value", run.state)),
                            "tasks": states,
                            "tries": tries,
                            "xcom": values,
                            "jobs": jobs,
                            "backfill": _backfill(backfill),
                        },
                        default=str,
                    )
                )
            )
    return out


def _backfill(backfill: Any) -> dict[str, Any] | None:
    if backfill is None:
        return None
    return {
        "id": backfill.id,
        "completed": backfill.completed_at is not None,
        "paused": bool(backfill.is_paused),
        "max_active_runs": backfill.max_active_runs,
    }
