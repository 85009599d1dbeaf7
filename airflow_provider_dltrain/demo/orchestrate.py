"""``dltrain demo run``: seed, run the demo DAGs date by date, print what each date produced."""

from __future__ import annotations

import time
from datetime import date, timedelta

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.demo.run import DEMO_DAGS, airflow_env, ensure_airflow_db, run_dag_for_date
from airflow_provider_dltrain.demo.seed import seed
from airflow_provider_dltrain.demo.summary import ingest_summary


def run_demo(start: date, days: int, dag_ids: tuple[str, ...] = DEMO_DAGS) -> int:
    """Run ``dag_ids`` for ``days`` dates from ``start``; return a process exit code."""
    began = time.monotonic()
    dates = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    print(f"DLTRAIN_HOME={paths.home()}")
    for day in seed(paths.landing(), start, days):
        print(f"  landing {day.ds}: {'seeded' if day.created else 'present'} ({day.images} files)")
    env = airflow_env()
    ensure_airflow_db(env)
    for ds in dates:
        for dag_id in dag_ids:
            outcome = run_dag_for_date(dag_id, ds, env)
            status = "ok" if outcome.ok else "FAILED"
            print(f"{ds} {dag_id}: {status} in {outcome.seconds:.1f}s (log: {outcome.log_path})")
            if not outcome.ok:
                print(outcome.tail)
                return 1
        s = ingest_summary(ds)
        print(
            f"{ds}  digits version {s['digits_version']}: {s['rows']} rows written, "
            f"{s['quarantined']} quarantined"
        )
    print(f"demo finished in {time.monotonic() - began:.1f}s")
    return 0
