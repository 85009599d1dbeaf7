"""Run the demo DAGs for consecutive dates through ``airflow dags test``, all state under ``$DLTRAIN_HOME``.

``airflow dags test DAG D`` on a data-interval timetable runs the interval that *ends* at D. A
backfill of D runs [D, D+1). To give "run date D" the interval a backfill of D gets, the demo asks
for logical date D + 1 day; the DAGs take their partition from ``data_interval_start``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.demo import paths


def dags_folder() -> str:
    if os.environ.get("DLTRAIN_DAGS_FOLDER"):
        return os.environ["DLTRAIN_DAGS_FOLDER"]
    repo_dags = Path(__file__).resolve().parents[2] / "dags"
    if repo_dags.is_dir():
        return str(repo_dags)
    raise FileNotFoundError(
        "cannot find the demo DAGs: set DLTRAIN_DAGS_FOLDER to the repository's dags/ folder"
    )


def airflow_env() -> dict[str, str]:
    """Environment for Airflow commands: project-local home, the demo DAGs, embedded MLflow store."""
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__UNIT_TEST_MODE"}
    env.update(
        {
            "DLTRAIN_HOME": paths.home(),
            "AIRFLOW_HOME": paths.airflow_home(),
            # the demo's own metadata DB, whatever database the calling environment points at
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{os.path.join(paths.airflow_home(), 'airflow.db')}",
            "AIRFLOW__CORE__DAGS_FOLDER": dags_folder(),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "MLFLOW_TRACKING_URI": env.get("MLFLOW_TRACKING_URI") or paths.mlflow_uri(),
            "GIT_PYTHON_REFRESH": "quiet",
        }
    )
    env.setdefault("DLTRAIN_SPARK_MASTER", "local[2]")
    return env


def ensure_airflow_db(env: dict[str, str]) -> None:
    os.makedirs(env["AIRFLOW_HOME"], exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True
    )


@dataclass
class DagRunOutcome:
    dag_id: str
    ds: str
    ok: bool
    seconds: float
    log_path: str
    tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # the run's id, task states and return values: {"run_id", "state", "tasks", "xcom"}
    state: dict[str, Any] = field(default_factory=dict)


Run = tuple[str, str, "dict[str, Any] | None"]


def run_dags(
    runs: list[Run],
    env: dict[str, str],
    on_result: Callable[[DagRunOutcome], None] | None = None,
) -> list[DagRunOutcome]:
    """Run ``(dag_id, ds, conf)`` entries in order through the ``airflow dags test`` code path.

    All runs share one process (Airflow and Spark start once); each gets the data interval
    [ds, ds+1), as a backfill of ds does. Stops at the first failed run. Per-run logs go to
    ``$DLTRAIN_HOME/logs/<dag_id>/<ds>.log``.
    """
    from airflow_provider_dltrain.demo.runner import END, START

    log_root = Path(paths.home()) / "logs"
    cmd = [sys.executable, "-m", "airflow_provider_dltrain.demo.runner", json.dumps([list(r) for r in runs])]
    wall_start = time.time()
    outcomes: list[DagRunOutcome] = []
    current: list[str] = []
    spark_start = 0.0
    first_task_at: float | None = None
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(START):
            current = []
            continue
        if line.startswith(END):
            result = json.loads(line[len(END) :])
            log_dir = log_root / result["dag_id"]
            log_dir.mkdir(parents=True, exist_ok=True)
            log_path = log_dir / f"{result['ds']}.log"
            log_path.write_text("".join(current))
            ok = bool(result["ok"])
            tail = "".join(current[-40:]) + (f"\n{result['error']}" if result.get("error") else "")
            outcome = DagRunOutcome(
                result["dag_id"],
                result["ds"],
                ok,
                float(result["seconds"]),
                str(log_path),
                tail,
                state=dict(result.get("outcome") or {}),
            )
            outcomes.append(outcome)
            if on_result:
                on_result(outcome)
            continue
        current.append(line)
        match = _SPARK.search(line)
        if match:
            spark_start += float(match.group(1))
        if first_task_at is None and "[DAG TEST] starting task" in line:
            stamp = _STAMP.match(line)
            first_task_at = _epoch(stamp.group(1)) if stamp else time.time()
    proc.wait()
    if outcomes:
        airflow_start = max(0.0, (first_task_at or wall_start) - wall_start)
        outcomes[0].extra["startup_seconds"] = airflow_start + spark_start
    if proc.returncode and (not outcomes or outcomes[-1].ok):
        raise RuntimeError(f"the DAG runner exited with {proc.returncode}: {''.join(current[-30:])}")
    return outcomes


def run_dag_for_date(
    dag_id: str, ds: str, env: dict[str, str], conf: dict[str, Any] | None = None
) -> DagRunOutcome:
    """One run of ``dag_id`` covering [ds, ds+1), exactly as a backfill of ds."""
    outcomes = run_dags([(dag_id, ds, conf)], env)
    return outcomes[0]


_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z)")
_SPARK = re.compile(r"Spark session \S+ started in ([0-9.]+)s")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
