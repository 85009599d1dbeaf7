from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_dag_imports_without_errors_credentials_or_network():
    code = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags')!r})\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "print(sorted(bag.dags))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "dltrain_ingest" in out


def test_nightly_dags_use_a_data_interval_timetable_so_backfills_get_real_intervals():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.timetables.interval import CronDataIntervalTimetable

    bag = DagBag(dag_folder=str(REPO / "dags"))
    for dag_id, dag in bag.dags.items():
        assert isinstance(dag.timetable, CronDataIntervalTimetable), dag_id
