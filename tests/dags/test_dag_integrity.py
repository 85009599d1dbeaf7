from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.support.airflow_versions import dag_bag

REPO = Path(__file__).resolve().parents[2]
# every DAG the example files define: a file that stops defining one (or is not found) fails here
EXPECTED = {"dltrain_ingest", "dltrain_retrain", "dltrain_search", "dltrain_ablation"}


def test_every_dag_imports_without_errors_credentials_or_network():
    code = (
        "from tests.support.airflow_versions import dag_bag\n"
        f"bag = dag_bag({str(REPO / 'dags')!r})\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "print(sorted(bag.dags))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO
    ).stdout
    assert set(ast.literal_eval(out.strip().splitlines()[-1])) == EXPECTED, out


def test_nightly_dags_use_a_data_interval_timetable_so_backfills_get_real_intervals():
    from airflow.timetables.interval import CronDataIntervalTimetable

    bag = dag_bag(str(REPO / "dags"))
    assert set(bag.dags) == EXPECTED, sorted(bag.dags)
    for dag_id, dag in bag.dags.items():
        assert isinstance(dag.timetable, CronDataIntervalTimetable), dag_id
