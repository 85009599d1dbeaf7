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
from airflow_provider_dltrain.demo.spark_cds import jvm_options


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
    # the demo's Spark JVM lives about a minute on a few thousand rows: start it as the tests do
    env.setdefault("JAVA_TOOL_OPTIONS", jvm_options())
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
    with DagRunner(env) as runner:
        return runner.run(runs, on_result)


class DagRunner:
    """One runner process for several batches of runs (``with DagRunner(env) as r: r.run(...)``).

    Airflow and Spark start with the first batch; later batches pay neither. The environment is the
    one the process started with: a caller that changes it (another engine) needs another runner.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> DagRunner:
        from airflow_provider_dltrain.demo.dag_runner import SERVE

        cmd = [sys.executable, "-m", "airflow_provider_dltrain.demo.dag_runner", SERVE]
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def run(
        self, runs: list[Run], on_result: Callable[[DagRunOutcome], None] | None = None
    ) -> list[DagRunOutcome]:
        """Run ``runs`` in order in this runner's process; stops at the first failed run."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise RuntimeError("DagRunner.run outside its `with` block")
        wall_start = time.time()
        proc.stdin.write(json.dumps([list(r) for r in runs]) + "\n")
        proc.stdin.flush()
        reader = _BatchReader(Path(paths.home()) / "logs", on_result)
        for line in proc.stdout:
            if not reader.feed(line):
                break
        else:  # the process ended before the batch did
            code = proc.wait()
            if not reader.outcomes or reader.outcomes[-1].ok:
                raise RuntimeError(f"the DAG runner exited with {code}: {''.join(reader.current[-30:])}")
        if reader.outcomes:
            airflow_start = max(0.0, (reader.first_task_at or wall_start) - wall_start)
            reader.outcomes[0].extra["startup_seconds"] = airflow_start + reader.spark_start
        return reader.outcomes


class _BatchReader:
    """Splits the runner's output into one log and one :class:`DagRunOutcome` per run."""

    def __init__(self, log_root: Path, on_result: Callable[[DagRunOutcome], None] | None) -> None:
        self.log_root = log_root
        self.on_result = on_result
        self.outcomes: list[DagRunOutcome] = []
        self.current: list[str] = []
        self.spark_starts: list[tuple[float, float]] = []  # (when it was ready, seconds it took)
        self.first_task_at: float | None = None

    @property
    def spark_start(self) -> float:
        """Seconds the runs waited for Spark: all of a start a task made, what was left of one made ahead."""
        begun = self.first_task_at
        return sum(
            took if begun is None else min(took, max(0.0, ready - begun)) for ready, took in self.spark_starts
        )

    def feed(self, line: str) -> bool:
        """Take one line of output; False once the batch has ended."""
        from airflow_provider_dltrain.demo.dag_runner import BATCH_END, END, START

        if line.startswith(BATCH_END):
            return False
        if line.startswith(START):
            self.current = []
        elif line.startswith(END):
            self._finish(json.loads(line[len(END) :]))
        else:
            self.current.append(line)
            stamp = _STAMP.match(line)
            match = _SPARK.search(line)
            if match:
                self.spark_starts.append(
                    (_epoch(stamp.group(1)) if stamp else time.time(), float(match.group(1)))
                )
            if self.first_task_at is None and "[DAG TEST] starting task" in line:
                self.first_task_at = _epoch(stamp.group(1)) if stamp else time.time()
        return True

    def _finish(self, result: dict[str, Any]) -> None:
        log_dir = self.log_root / result["dag_id"]
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{result['ds']}.log"
        log_path.write_text("".join(self.current))
        tail = "".join(self.current[-40:]) + (f"\n{result['error']}" if result.get("error") else "")
        outcome = DagRunOutcome(
            result["dag_id"],
            result["ds"],
            bool(result["ok"]),
            float(result["seconds"]),
            str(log_path),
            tail,
            state=dict(result.get("outcome") or {}),
        )
        self.outcomes.append(outcome)
        if self.on_result:
            self.on_result(outcome)


_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z)")
_SPARK = re.compile(r"Spark session \S+ started in ([0-9.]+)s")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
