"""Run several DAG runs through the ``airflow dags test`` code path in one process.

``python -m airflow_provider_dltrain.demo.dag_runner '[["dltrain_ingest", "2026-11-24", null], ...]'``

Each entry is ``[dag_id, ds, conf]``. Every run goes through ``airflow.cli.commands.dag_command.dag_test``
— the function behind ``airflow dags test`` — with logical date ``ds + 1 day``, so the run covers the
data interval [ds, ds+1) a backfill of ``ds`` gets. Running them in one process pays Airflow's and
Spark's start-up once instead of once per run. Markers on stdout delimit the runs:
``DLTRAIN-RUN-START {json}`` and ``DLTRAIN-RUN-END {json}`` (with ``ok``, ``seconds`` and ``outcome``: the
run's id, task states and return values, read here so that no caller has to start Airflow again for them).

``python -m airflow_provider_dltrain.demo.dag_runner --serve`` reads one such list a line from stdin and prints
``DLTRAIN-BATCH-END`` after each, until stdin closes: a caller with several batches (a test module
that checks the tables between them) starts Airflow and Spark once for all of them.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import date, timedelta
from typing import Any

START, END = "DLTRAIN-RUN-START", "DLTRAIN-RUN-END"
SERVE, BATCH_END = "--serve", "DLTRAIN-BATCH-END"


def _args(dag_id: str, logical: Any, conf: dict[str, Any] | None) -> argparse.Namespace:
    return argparse.Namespace(
        dag_id=dag_id,
        logical_date=logical,
        conf=json.dumps(conf) if conf else None,
        use_executor=False,
        mark_success_pattern=None,
        bundle_name=None,
        dagfile_path=None,
        show_dagrun=False,
        imgcat_dagrun=False,
        save_dagrun=None,
        verbose=False,
    )


def check_schedule(dag: Any, ds: str) -> None:
    """Refuse a date outside the DAG's ``start_date``/``end_date``: Airflow would create a run of no task.

    A run for such a date "succeeds" with nothing done, which reads as if the date had been processed.
    """
    from datetime import datetime, timezone

    day = datetime.fromisoformat(ds).replace(tzinfo=timezone.utc)
    start, end = dag.start_date, dag.end_date
    if start is not None and day < start:
        raise ValueError(
            f"DAG {dag.dag_id!r} starts on {start.date().isoformat()} (start_date): {ds} is before it, so a run "
            f"for it would run no task. Run dates from {start.date().isoformat()} on, or move the DAG's start_date."
        )
    if end is not None and day > end:
        raise ValueError(
            f"DAG {dag.dag_id!r} ends on {end.date().isoformat()} (end_date): {ds} is after it, so a run for it "
            "would run no task."
        )


def run_one(dag_id: str, ds: str, conf: dict[str, Any] | None) -> dict[str, Any]:
    from airflow.cli.commands import dag_command
    from airflow.sdk import timezone

    logical = (date.fromisoformat(ds) + timedelta(days=1)).isoformat()
    started = time.monotonic()
    ok, error = True, None
    outcome: dict[str, Any] = {}
    try:
        dag = _dag(dag_id)
        check_schedule(dag, ds)
        dag_command.dag_test(_args(dag_id, timezone.parse(logical), conf), dag=dag)
        outcome = _outcome(dag_id, ds)
        states = dict(outcome.get("tasks") or {})
        ran = {t: s for t, s in states.items() if s not in ("None", "none", "scheduled", "queued")}
        if not ran:  # a run of no task is never "ok": nothing was processed for this date
            ok, error = False, f"the run of {dag_id} for {ds} ran no task (task states: {states or 'none'})"
    except SystemExit as exc:  # dag_test exits when the run failed
        ok, error = False, str(exc)
    except Exception as exc:  # a DAG that cannot be loaded, a date outside the schedule, a broken DB, ...
        ok, error = False, f"{type(exc).__name__}: {exc}"
    if not outcome and error is not None:
        outcome = _outcome(dag_id, ds)
    return {
        "dag_id": dag_id,
        "ds": ds,
        "ok": ok,
        "error": error,
        "seconds": time.monotonic() - started,
        "outcome": outcome,
    }


_DAGS: dict[str, tuple[float | None, Any]] = {}


def _dag(dag_id: str) -> Any:
    """``dag_id`` as ``airflow dags test`` loads it, parsed again only when its file changed.

    ``get_bagged_dag`` parses the DAG folder and writes every DAG to the DB; ``dag_test`` writes the
    DAG it runs again anyway, so one parse per file version is all a run needs (~0.2 s a run).
    """
    import os

    from airflow.cli.commands import dag_command

    cached = _DAGS.get(dag_id)
    if cached is not None:
        mtime, dag = cached
        try:
            if mtime is not None and os.stat(dag.fileloc).st_mtime == mtime:
                return dag
        except OSError:
            pass
    dag = dag_command.get_bagged_dag(bundle_names=None, dag_id=dag_id, dagfile_path=None)
    try:
        mtime = os.stat(dag.fileloc).st_mtime
    except (OSError, TypeError):
        mtime = None
    _DAGS[dag_id] = (mtime, dag)
    return dag


def _outcome(dag_id: str, ds: str) -> dict[str, Any]:
    """Task states and return values of the newest run of ``dag_id`` whose interval starts at ``ds``."""
    from airflow_provider_dltrain.demo.xcoms import run_outcome

    try:
        return json.loads(json.dumps(run_outcome(dag_id, ds), default=str))
    except Exception:  # a broken DB: the run's own error says more
        return {}


def run_batch(runs: list[list[Any]]) -> bool:
    """Run ``runs`` in order, stopping at the first failed one (later dates depend on earlier ones)."""
    for dag_id, ds, conf in runs:
        print(f"{START} {json.dumps({'dag_id': dag_id, 'ds': ds, 't': time.time()})}", flush=True)
        result = run_one(dag_id, ds, conf)
        sys.stderr.flush()
        print(f"{END} {json.dumps(result, default=str)}", flush=True)
        if not result["ok"]:
            return False
    return True


def ensure_db() -> None:
    """Bring Airflow's metadata DB to the installed Airflow's schema (``airflow db migrate``), in this
    process: a separate ``airflow db migrate`` pays Airflow's import again, and on a DB already at
    the head it only finds that out (about a second here)."""
    from airflow import settings
    from airflow.utils import db
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    if settings.engine is None:  # not configured yet in this process
        settings.configure_orm()
    assert settings.engine is not None
    with settings.engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    heads = set(ScriptDirectory.from_config(db._get_alembic_config()).get_heads())
    if current not in heads:
        db.upgradedb()


def _start_spark() -> None:
    from airflow_provider_dltrain.etl.spark import spark_session

    try:
        spark_session()
    except Exception as err:  # the first task that needs Spark starts it again and reports why it fails
        print(f"Spark did not start ahead of the runs: {err}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    import os

    from airflow_provider_dltrain.demo import paths

    if paths.train_backend() == "ddp":
        from airflow_provider_dltrain.training.forked import warm_up

        warm_up()  # the ranks' imports, while this process starts Airflow
    if paths.engine() == "local" and not paths.engine_options():
        # The example DAGs' ETL and scoring run in this process's Spark session: its JVM starts beside
        # Airflow's start (one core is idle meanwhile); the first task waits on spark_session's lock.
        threading.Thread(target=_start_spark, name="dltrain-spark-start", daemon=True).start()
    ensure_db()
    # Checked once just now: ``dag_test``'s CLI wrapper would check the migrations again on every run.
    os.environ["AIRFLOW__DATABASE__CHECK_MIGRATIONS"] = "False"
    if argv[:1] != [SERVE]:
        return 0 if run_batch(json.loads(argv[0])) else 1
    # one batch a line on stdin until it closes: each batch after the first finds Airflow and Spark started
    for line in sys.stdin:
        if line.strip():
            run_batch(json.loads(line))
            print(BATCH_END, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
