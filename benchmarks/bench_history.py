"""A year of nightly history: an unchanged re-run costs the same at day 360 as at day 10.

``benchmarks.history_year`` writes a simulated year (365 nights of ingest, pin, training identity
and scoring through the provider's decisions and writers, a weekly compaction and VACUUM, commit
files aged to their nights, delta-rs's checkpoints and log clean-up active) once locally and once
on the fake S3 (moto's server on loopback, its request recorder on). Then the control plane of an
unchanged re-run of one night (ETL and scoring re-run checks, the cut-off pin, the training data
fingerprint: every decision, nothing written) is timed at night 10 and at night 360, and on S3 its
storage requests are counted by the server.

The local year trains, gates and scores every night (MLflow on SQLite beside the tables); once
timed, days 3, 180 and 360 of it are backfilled through Airflow (``airflow dags test``'s code path)
with the nightly retrain DAG's shape (``benchmarks/year_dags``): each must reproduce — nothing
committed to any table, no MLflow run, the champion for the date scored, the pin the nightly's or
its re-resolved equivalent, the backfill report's verdict ``reproduced``.

Figures: per-date cost at day 360 ÷ at day 10, locally and on S3 (goal <= 1.5); S3 requests at
day 360 ÷ at day 10 (goal <= 1.1: equal within a constant); the local generator's wall time ÷ 15
minutes (goal <= 1); the backfilled dates that reproduced ÷ 3 (goal >= 1); the backfill plan of
every night at once in seconds ÷ 2 s (goal <= 1, with its ratio to one night's plan) and the
backfilled dates whose outcome the plan predicted ÷ 3 (goal >= 1), see ``benchmarks.plan_year``.
``DLTRAIN_BENCH_HISTORY_NIGHTS`` shortens the year (days 10 and nights-5; backfills of 3, nights/2
and nights-5).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks import plan_year
from benchmarks.history_year import Year, generate, rerun

ROUNDS = 15
GENERATOR_LIMIT_S = 15 * 60


def _nights() -> int:
    return int(os.environ.get("DLTRAIN_BENCH_HISTORY_NIGHTS", "365"))


def _cost(year: Year, day: int) -> float:
    rerun(year, day)  # warm: imports, the first reads
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        rerun(year, day)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _requests(s3: Any, year: Year, day: int) -> int:
    """Storage requests one unchanged re-run of ``day`` makes, counted by the server."""
    return len(s3.requests(lambda: rerun(year, day)))


def _local(nights: int) -> tuple[list[dict[str, Any]], float]:
    from airflow_provider_dltrain.store.config import TrackingConfig

    with tempfile.TemporaryDirectory(prefix="bench-history-") as home:
        year = generate(
            os.path.join(home, "lake"),
            os.path.join(home, "landing"),
            nights,
            tracking=TrackingConfig(tracking_uri=f"sqlite:///{os.path.join(home, 'mlflow.db')}"),
            progress=lambda m: print(f"   {m}", flush=True),
        )
        print(
            f"   generator: {year.seconds:.0f}s, {len(year.promoted)} of {nights} models promoted", flush=True
        )
        early, late = _cost(year, 10), _cost(year, nights - 5)
        days = [3, nights // 2 if nights < 365 else 180, nights - 5]
        reproduced, detail, by_date = backfill(home, year, days)
        planned = plan_year.results(home, year.start, nights, by_date)
        return [
            {
                "name": f"history: unchanged re-run of a date, day {nights - 5} / day 10 (local)",
                "ratio": late / early,
                "goal": "<= 1.5",
                "detail": f"({late * 1000:.1f} ms vs {early * 1000:.1f} ms, medians of {ROUNDS})",
            },
            {
                "name": f"history: backfills of days {', '.join(map(str, days))} reproduced / {len(days)}",
                "ratio": reproduced / len(days),
                "goal": ">= 1.0",
                "detail": detail,
            },
            *planned,
        ], year.seconds


def _table_versions(year: Year) -> dict[str, int]:
    from airflow_provider_dltrain import lake

    return {
        uri: lake.open_table(uri, None).version() for uri in (year.images, year.quarantine, year.predictions)
    }


def _mlflow_runs(year: Year) -> int:
    client = year.tracking.client()
    return sum(
        len(client.search_runs([e.experiment_id], max_results=5000)) for e in client.search_experiments()
    )


def backfill(home: str, year: Year, days: list[int]) -> tuple[int, str, dict[str, bool]]:
    """Backfill ``days`` of ``year`` through Airflow; how many reproduced the nightly, what each did,
    and per date whether it reproduced."""
    from airflow_provider_dltrain.demo.run import DagRunner, airflow_env
    from benchmarks import year_model

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    saved = {k: os.environ.get(k) for k in ("DLTRAIN_HOME", "DLTRAIN_DAGS_FOLDER")}
    os.environ.update(
        {"DLTRAIN_HOME": home, "DLTRAIN_DAGS_FOLDER": os.path.join(repo, "benchmarks", "year_dags")}
    )
    try:
        env = airflow_env()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        env["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
        tables, runs = _table_versions(year), _mlflow_runs(year)
        dates = [year.ds(day) for day in days]
        started = time.perf_counter()
        with DagRunner(env) as runner:
            outcomes = runner.run([(year_model.DAG_ID, ds, None) for ds in dates])
        seconds = time.perf_counter() - started
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    words, good, by_date = [], 0, {}
    untouched = _table_versions(year) == tables and _mlflow_runs(year) == runs
    for ds, outcome in zip(dates, outcomes, strict=False):
        problems = _reproduction_problems(year, ds, outcome)
        by_date[ds] = not problems and untouched
        if not problems and untouched:
            good += 1
        verdict = (outcome.state.get("report") or {}).get("verdict")
        notes = (outcome.state.get("report") or {}).get("notes") or []
        words.append(
            f"{ds}: {verdict}{' (pin re-resolved)' if notes else ''}{'; ' + '; '.join(problems) if problems else ''}"
        )
        print(f"   backfill {words[-1]} in {outcome.seconds:.1f}s", flush=True)
    if not untouched:
        words.append("a table or the MLflow store changed during the backfills")
    return good, f"({'; '.join(words)}; {seconds:.0f}s for {len(dates)} runs)", by_date


def _reproduction_problems(year: Year, ds: str, outcome: Any) -> list[str]:
    """What differs from the nightly's answer for ``ds`` (empty: reproduced)."""
    if not outcome.ok:
        return [f"run failed: {outcome.tail[-500:]}"]
    tasks, xcom = outcome.state.get("tasks") or {}, outcome.state.get("xcom") or {}
    report = outcome.state.get("report") or {}
    problems = []
    if report.get("verdict") != "reproduced":
        problems.append(f"verdict {report.get('verdict')}: {report.get('changes')}")
    if (tasks.get("train"), tasks.get("register")) != ("skipped", "skipped"):
        problems.append(f"train {tasks.get('train')}, register {tasks.get('register')}")
    lineage = xcom.get("lineage") or {}
    model = (lineage.get("model") or {}).get("version")
    if str(model) != str(year.champions[ds]["version"]):
        problems.append(f"scored with v{model}, the nightly with v{year.champions[ds]['version']}")
    scored_by = ((lineage.get("prediction") or {}).get("committed_by") or {}).get("run_id")
    if scored_by != f"scheduled__{ds}T00:00:00+00:00":
        problems.append(f"the predictions it returns were committed by {scored_by}, not the nightly")
    pin = xcom.get("wait_for_partition") or {}
    if pin.get("version") != year.pins[ds]["version"] and not report.get("notes"):
        problems.append(
            f"pinned v{pin.get('version')}, the nightly v{year.pins[ds]['version']}, no re-resolution note"
        )
    return problems


def _s3(nights: int) -> list[dict[str, Any]]:
    from airflow_provider_dltrain.testing.s3_recorder import recording_s3

    with tempfile.TemporaryDirectory(prefix="bench-history-s3-") as home, recording_s3(home) as s3:
        s3.create_bucket("year")
        year = generate(
            "s3://year/lake",
            os.path.join(home, "landing"),
            nights,
            storage_options=s3.storage_options,
            progress=lambda m: print(f"   s3 {m}", flush=True),
        )
        early_n, late_n = _requests(s3, year, 10), _requests(s3, year, nights - 5)
        early, late = _cost(year, 10), _cost(year, nights - 5)
        print(f"   s3 generator: {year.seconds:.0f}s for {nights} nights", flush=True)
        return [
            {
                "name": f"history: unchanged re-run of a date, day {nights - 5} / day 10 (fake S3)",
                "ratio": late / early,
                "goal": "<= 1.5",
                "detail": f"({late * 1000:.1f} ms vs {early * 1000:.1f} ms, medians of {ROUNDS})",
            },
            {
                "name": f"history: S3 requests of that re-run, day {nights - 5} / day 10",
                "ratio": late_n / early_n,
                "goal": "<= 1.1",
                "detail": f"({late_n} vs {early_n} requests)",
            },
        ]


def run() -> list[dict[str, Any]]:
    nights = _nights()
    results, seconds = _local(nights)
    results.append(
        {
            "name": f"history: generator wall time, {nights} nights / 15 min",
            "ratio": seconds / GENERATOR_LIMIT_S,
            "goal": "<= 1.0",
            "detail": f"({seconds:.0f}s)",
        }
    )
    results += _s3(nights)
    return results


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
