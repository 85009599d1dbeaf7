"""``dltrain demo run``: seed, run the demo DAGs date by date, print what each date produced."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import date, timedelta
from typing import Any

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dag_for_date
from airflow_provider_dltrain.demo.seed import seed
from airflow_provider_dltrain.demo.summary import ingest_summary, partition_rows

DEMO_DAGS = ("dltrain_ingest", "dltrain_retrain")


def run_outcome(dag_id: str, ds: str, env: dict[str, str]) -> dict[str, Any]:
    """Task states and return values of the newest run of ``dag_id`` for ``ds`` (from Airflow's DB)."""
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain.demo.xcoms", dag_id, ds],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if proc.returncode == 0 and lines else {}


def describe_retrain(outcome: dict[str, Any], ds: str) -> list[str]:
    tasks, xcom = outcome.get("tasks", {}), outcome.get("xcom", {})
    pinned = xcom.get("wait_for_partition") or {}
    lines = [f"    training data pinned to digits version {pinned.get('version')} (ds <= {ds})"]
    train = xcom.get("train")
    if tasks.get("train") == "skipped":
        lines.append(
            "    training skipped: data, code and hyper-parameters unchanged since the champion for this date"
        )
    elif train:
        acc = (train.get("metrics") or {}).get("val_accuracy")
        lines.append(
            f"    trained MLflow run {train.get('run_id')}: val_accuracy {acc:.3f}"
            if acc is not None
            else f"    trained MLflow run {train.get('run_id')}"
        )
    reg = xcom.get("register")
    if reg:
        verdict = "PROMOTED" if reg.get("promoted") else "not promoted"
        lines.append(
            f"    model {reg.get('name')} version {reg.get('version')}: {verdict} — {reg.get('reason')}"
        )
        lines.append(f"    champion for {ds}: version {reg.get('champion_version')}")
    version, rows = partition_rows(paths.table("digit_predictions"), ds)
    lines.append(f"    predictions: {rows} rows in digit_predictions version {version}")
    return lines


def run_demo(start: date, days: int, dag_ids: tuple[str, ...] = DEMO_DAGS) -> int:
    """Run ``dag_ids`` for ``days`` dates from ``start``; return a process exit code."""
    began = time.monotonic()
    dates = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    print(f"DLTRAIN_HOME={paths.home()}")
    for day in seed(paths.landing(), start, days):
        print(f"  landing {day.ds}: {'seeded' if day.created else 'present'} ({day.images} files)")
    env = airflow_env()
    ensure_airflow_db(env)
    durations: list[float] = []
    startup: list[float] = []
    for ds in dates:
        print(f"\n{ds}")
        for dag_id in dag_ids:
            outcome = run_dag_for_date(dag_id, ds, env)
            durations.append(outcome.seconds)
            startup.append(float(outcome.extra.get("startup_seconds", 0.0)))
            print(
                f"  {dag_id}: {'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f}s (log: {outcome.log_path})"
            )
            if not outcome.ok:
                print(outcome.tail)
                return 1
            if dag_id == "dltrain_ingest":
                s = ingest_summary(ds)
                print(
                    f"    digits version {s['digits_version']}: {s['rows']} rows written, {s['quarantined']} quarantined"
                )
            elif dag_id == "dltrain_retrain":
                print("\n".join(describe_retrain(run_outcome(dag_id, ds, env), ds)))
    total = time.monotonic() - began
    fixed = sum(startup)
    print(
        f"\ndemo finished in {total:.1f}s ({len(durations)} DAG runs); fixed start-up (Airflow process and "
        f"execution API, Spark sessions) {fixed:.1f}s = {fixed / total:.0%} of the wall time"
    )
    print(f"lineage of the newest predictions: dltrain lineage {paths.table('digit_predictions')}")
    print(f"MLflow UI on the demo's store:      mlflow ui --backend-store-uri {paths.mlflow_uri()}")
    return 0
