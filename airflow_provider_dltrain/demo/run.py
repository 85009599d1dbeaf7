"""Run the demo DAGs for consecutive dates through ``airflow dags test``, all state under ``$DLTRAIN_HOME``.

``airflow dags test DAG D`` on a data-interval timetable runs the interval that *ends* at D. A
backfill of D runs [D, D+1). To give "run date D" the interval a backfill of D gets, the demo asks
for logical date D + 1 day; the DAGs take their partition from ``data_interval_start``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
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
    env = dict(os.environ)
    env.update(
        {
            "DLTRAIN_HOME": paths.home(),
            "AIRFLOW_HOME": paths.airflow_home(),
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


def run_dag_for_date(dag_id: str, ds: str, env: dict[str, str]) -> DagRunOutcome:
    """``airflow dags test`` giving the run the interval [ds, ds+1), exactly as a backfill of ds."""
    logical = (date.fromisoformat(ds) + timedelta(days=1)).isoformat()
    log_dir = Path(paths.home()) / "logs" / dag_id
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{ds}.log"
    started = time.monotonic()
    wall_start = time.time()
    with open(log_path, "w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "test", dag_id, logical],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    ok = proc.returncode == 0 and "state=success" in text
    outcome = DagRunOutcome(dag_id, ds, ok, seconds, str(log_path), "\n".join(text.splitlines()[-40:]))
    outcome.extra["startup_seconds"] = startup_seconds(text, wall_start)
    return outcome


_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z)")
_SPARK = re.compile(r"Spark session \S+ started in ([0-9.]+)s")


def startup_seconds(text: str, wall_start: float) -> float:
    """Fixed start-up in one ``dags test`` process: Airflow until the first task starts, plus Spark sessions."""
    airflow_start = 0.0
    for line in text.splitlines():
        if "[DAG TEST] starting task" in line:
            stamp = _STAMP.match(line)
            if stamp:
                first = datetime.fromisoformat(stamp.group(1).replace("Z", "+00:00")).timestamp()
                airflow_start = max(0.0, first - wall_start)
            break
    return airflow_start + sum(float(m.group(1)) for m in _SPARK.finditer(text))
