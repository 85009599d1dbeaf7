"""``dltrain demo run``: seed, run the demo DAGs date by date, print what each date produced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import date, timedelta
from typing import Any

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.demo.run import DagRunner, DagRunOutcome, airflow_env
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


def describe_ingest(outcome: dict[str, Any], ds: str) -> str:
    """What the ingest of ``ds`` did: the version it committed, or that the content was unchanged."""
    written = (outcome.get("xcom") or {}).get("ingest_images") or {}
    s = ingest_summary(ds)
    if written and written.get("committed") is False:
        return (
            f"    digits partition ds={ds} unchanged: no commit (still version {written.get('version')}); "
            f"{s['rows']} rows, {s['quarantined']} quarantined"
        )
    version = written.get("version", s["digits_version"])
    return f"    digits version {version}: {s['rows']} rows written, {s['quarantined']} quarantined"


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
    newest, rows = partition_rows(paths.table("digit_predictions"), ds)
    version = (xcom.get("score") or {}).get("version", newest)
    lines.append(f"    predictions: {rows} rows in digit_predictions version {version}")
    return lines


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """The backfill report's lines for one run: reproduced, or changed and what changed."""
    from airflow_provider_dltrain.backfill_report import DateReport, format_line

    head, *rest = format_line(DateReport.from_dict(report))
    return ["    verdict: " + head.split("  ", 1)[-1], *(f"  {line}" for line in rest)]


def run_demo(start: date, days: int, dag_ids: tuple[str, ...] = DEMO_DAGS) -> int:
    """Run ``dag_ids`` for ``days`` dates from ``start``; return a process exit code."""
    began = time.monotonic()
    dates = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    print(f"DLTRAIN_HOME={paths.home()}")
    env = airflow_env()
    os.makedirs(env["AIRFLOW_HOME"], exist_ok=True)

    def report(outcome: DagRunOutcome) -> None:
        if outcome.dag_id == dag_ids[0]:
            print(f"\n{outcome.ds}")
        print(
            f"  {outcome.dag_id}: {'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f}s (log: {outcome.log_path})"
        )
        if not outcome.ok:
            print(outcome.tail)
        elif outcome.dag_id == "dltrain_ingest":
            print(describe_ingest(outcome.state, outcome.ds))
        elif outcome.dag_id == "dltrain_retrain":
            print("\n".join(describe_retrain(outcome.state, outcome.ds)))
        if outcome.ok and outcome.state.get("report"):
            print("\n".join(verdict_lines(outcome.state["report"])))
        sys.stdout.flush()

    with DagRunner(env) as runner:  # Airflow starts and migrates its DB while the landing zone is seeded
        for day in seed(paths.landing(), start, days):
            print(f"  landing {day.ds}: {'seeded' if day.created else 'present'} ({day.images} files)")
        print(
            f"running {', '.join(dag_ids)} for {len(dates)} date(s) through `airflow dags test`, one process"
        )
        outcomes = runner.run([(dag_id, ds, None) for ds in dates for dag_id in dag_ids], on_result=report)

    if not outcomes or not all(o.ok for o in outcomes) or len(outcomes) != len(dates) * len(dag_ids):
        return 1
    total = time.monotonic() - began
    fixed = sum(float(o.extra.get("startup_seconds", 0.0)) for o in outcomes)
    print(
        f"\ndemo finished in {total:.1f}s ({len(outcomes)} DAG runs); fixed start-up (Airflow, its in-process "
        f"execution API, the Spark session) {fixed:.1f}s = {fixed / total:.0%} of the wall time"
    )
    print(f"lineage of the newest predictions: dltrain lineage {paths.table('digit_predictions')}")
    print(f"MLflow UI on the demo's store:      mlflow ui --backend-store-uri {paths.mlflow_uri()}")
    return 0
