"""A year of nightly history: an unchanged re-run costs the same at day 360 as at day 10.

``benchmarks.history_year`` writes a simulated year (365 nights of ingest, pin, training identity
and scoring through the provider's decisions and writers, a weekly compaction and VACUUM, commit
files aged to their nights, delta-rs's checkpoints and log clean-up active) once locally and once
on the fake S3 (moto's server on loopback, its request recorder on). Then the control plane of an
unchanged re-run of one night (ETL and scoring re-run checks, the cut-off pin, the training data
fingerprint: every decision, nothing written) is timed at night 10 and at night 360, and on S3 its
storage requests are counted by the server.

Figures: per-date cost at day 360 ÷ at day 10, locally and on S3 (goal <= 1.5); S3 requests at
day 360 ÷ at day 10 (goal <= 1.1: equal within a constant); the local generator's wall time ÷ 15
minutes (goal <= 1). ``DLTRAIN_BENCH_HISTORY_NIGHTS`` shortens the year (days 10 and nights-5).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

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
    with tempfile.TemporaryDirectory(prefix="bench-history-") as root:
        year = generate(
            root, os.path.join(root, "landing"), nights, progress=lambda m: print(f"   {m}", flush=True)
        )
        early, late = _cost(year, 10), _cost(year, nights - 5)
        return [
            {
                "name": f"history: unchanged re-run of a date, day {nights - 5} / day 10 (local)",
                "ratio": late / early,
                "goal": "<= 1.5",
                "detail": f"({late * 1000:.1f} ms vs {early * 1000:.1f} ms, medians of {ROUNDS})",
            }
        ], year.seconds


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
