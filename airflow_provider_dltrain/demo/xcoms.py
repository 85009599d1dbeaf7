"""Print, as JSON, the task states and return values of the newest run of a DAG for a date.

Run as ``python -m airflow_provider_dltrain.demo.xcoms DAG_ID YYYY-MM-DD`` inside the demo's Airflow
environment (it reads the metadata database, which only the demo driver — never a task — does).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone


def run_outcome(dag_id: str, ds: str) -> dict:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    start = datetime.fromisoformat(ds).replace(tzinfo=timezone.utc)
    with create_session() as session:
        run = session.scalars(
            select(DagRun)
            .where(DagRun.dag_id == dag_id, DagRun.data_interval_start == start)
            .order_by(DagRun.id.desc())
            .limit(1)
        ).first()
        if run is None:
            return {}
        states = {
            ti.task_id: str(getattr(ti.state, "value", ti.state))
            for ti in session.scalars(
                select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
            )
        }
        values = {}
        for row in session.scalars(
            select(XComModel).where(XComModel.dag_run_id == run.id, XComModel.key == "return_value")
        ):
            values[row.task_id] = XComModel.deserialize_value(row)
        return {"run_id": run.run_id, "state": str(run.state), "tasks": states, "xcom": values}


if __name__ == "__main__":
    print(json.dumps(run_outcome(sys.argv[1], sys.argv[2]), default=str))
