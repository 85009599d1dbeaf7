"""The backfill plan of a generated year (``benchmarks.history_year``): its cost, and what it predicts.

The nightly retrain DAG's shape (``benchmarks/year_dags``) is parsed with ``DLTRAIN_HOME`` at the
year, then :func:`~airflow_provider_dltrain.backfill_plan.plan_backfill` plans every night of it (the
whole range at once, as the plugin's page and ``dltrain backfill-report --plan`` ask for it) and one
night alone. An unchanged year must plan ``will skip`` for every night: the backfills of it that
``bench_history`` runs through Airflow then reproduce exactly those nights.

Run alone on a year kept on disk (``gen.py``-style: ``lake/``, ``mlflow.db`` under HOME)::

    python -m benchmarks.plan_year HOME NIGHTS [START]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

ROUNDS = 5


@contextlib.contextmanager
def _home(home: str) -> Iterator[None]:
    saved = os.environ.get("DLTRAIN_HOME")
    os.environ["DLTRAIN_HOME"] = home
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DLTRAIN_HOME", None)
        else:
            os.environ["DLTRAIN_HOME"] = saved


def year_dag(home: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    from benchmarks import year_model

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "year_dags")
    with _home(home):
        return DagBag(dag_folder=folder, safe_mode=False).dags[year_model.DAG_ID]


def plan_cost(home: str, start: date, nights: int) -> tuple[dict[str, str], float, float]:
    """The verdict of every night, the seconds of the whole range's plan and of one night's (median)."""
    from airflow_provider_dltrain.backfill_plan import plan_backfill

    dag = year_dag(home)
    last = start + timedelta(days=nights - 1)
    middle = start + timedelta(days=nights // 2)
    # as the plugin and the command line plan it: the tasks' own INFO lines stay out (plan_tasks.QUIET)
    with _home(home):
        plan_backfill(dag, middle, middle)  # warm: imports, the first reads
        one = []
        for _ in range(ROUNDS):
            began = time.perf_counter()
            plan_backfill(dag, middle, middle)
            one.append(time.perf_counter() - began)
        began = time.perf_counter()
        plan = plan_backfill(dag, start, last)
        whole = time.perf_counter() - began
    return {d.ds: d.verdict for d in plan.dates}, whole, statistics.median(one)


def results(home: str, start: date, nights: int, backfilled: dict[str, bool]) -> list[dict[str, Any]]:
    """The figures: the range's plan in seconds / 2 s, and nights predicted as the backfills did them.

    :param backfilled: date -> whether its backfill through Airflow reproduced the nightly.
    """
    verdicts, whole, one = plan_cost(home, start, nights)
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    agree = sum((verdicts.get(ds) == "will skip") == did for ds, did in backfilled.items())
    return [
        {
            "name": f"plan: {nights} dates of the year planned at once, seconds / 2 s",
            "ratio": whole / 2.0,
            "goal": "<= 1.0",
            "detail": f"({whole:.2f} s = {whole / one:.0f} x one date's plan of {one * 1000:.0f} ms; {counts})",
        },
        {
            "name": f"plan: backfilled dates whose verdict the plan predicted / {len(backfilled)}",
            "ratio": agree / max(len(backfilled), 1),
            "goal": ">= 1.0",
            "detail": f"(every night 'will skip': {counts.get('will skip', 0) == nights})",
        },
    ]


if __name__ == "__main__":
    home, nights = sys.argv[1], int(sys.argv[2])
    first = date.fromisoformat(sys.argv[3]) if len(sys.argv) > 3 else date(2025, 12, 1)
    verdicts, whole, one = plan_cost(home, first, nights)
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    print(f"{nights} dates: {whole:.2f} s; one date: {one * 1000:.0f} ms; ratio {whole / one:.1f}; {counts}")
