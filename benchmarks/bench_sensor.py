"""Sensor poke cost against the length of a table's history.

Times ``DeltaTableHook.find_version(uri, min_version=5, partition=...)`` — one sensor poke — on a
1,000-commit table over the same poke on a 10-commit table, with checkpoints every 10 and every
100 commits (delta-rs' default). Goal <= 1.5: the poke must not grow with the history. Three
situations:

- waiting: the partition is absent, what every poke but the last one sees;
- firing: the partition was added by the newest commit, what the last poke sees;
- in checkpoint: the partition is older than the newest checkpoint, so the poke reads the
  checkpoint's partition columns. Its cost follows the number of live files (1,000 here), not the
  history; with a checkpoint every 100 commits the 10-commit table has no checkpoint at all.

The tables (one-row appends over 28 daily partitions) are built once under ``.bench/sensor`` and
reused; building a 1,000-commit table takes 20-30 s.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1] / ".bench" / "sensor"
REPEATS = 400
DAYS = 28


def _day(i: int) -> str:
    return f"2026-01-{i % DAYS + 1:02d}"


def _build(uri: Path, commits: int, checkpoint_interval: int) -> str:
    """A table of ``commits`` one-row appends (reused when already complete)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_provider_dltrain.lake.log import DeltaLog

    if uri.exists() and DeltaLog(str(uri)).latest_version() == commits - 1:
        return str(uri)
    shutil.rmtree(uri, ignore_errors=True)
    config = {"delta.checkpointInterval": str(checkpoint_interval)}
    for i in range(commits):
        row = pa.table({"x": pa.array([i], pa.int64()), "ds": [_day(i)]})
        write_deltalake(
            str(uri), row, mode="append", partition_by=["ds"], configuration=config if i == 0 else None
        )
    return str(uri)


def _median_pokes(tables: dict[str, dict[str, str]]) -> dict[str, float]:
    """Median seconds of one poke per table, interleaved so that machine drift hits all alike."""
    from airflow_provider_dltrain.hooks.delta import DeltaTableHook

    hook = DeltaTableHook(aws_conn_id=None)
    times: dict[str, list[float]] = {uri: [] for uri in tables}
    for uri, partition in tables.items():  # warm imports and the page cache
        hook.find_version(uri, min_version=5, partition=partition)
    for _ in range(REPEATS):
        for uri, partition in tables.items():
            started = time.perf_counter()
            hook.find_version(uri, min_version=5, partition=partition)
            times[uri].append(time.perf_counter() - started)
    return {uri: statistics.median(values) for uri, values in times.items()}


def run() -> list[dict]:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    results = []
    for interval in (10, 100):
        small = _build(BENCH_DIR / f"commits10_ckpt{interval}", 10, interval)
        big = _build(BENCH_DIR / f"commits1000_ckpt{interval}", 1000, interval)
        situations = {
            "waiting": ({"ds": "2027-01-01"}, {"ds": "2027-01-01"}),
            "firing": ({"ds": _day(9)}, {"ds": _day(999)}),
            "in checkpoint": ({"ds": _day(4)}, {"ds": _day(4)}),
        }
        for label, (small_partition, big_partition) in situations.items():
            medians = _median_pokes({small: small_partition, big: big_partition})
            if label == "in checkpoint" and interval > 10:
                label += " (the 10-commit table has none)"
            t_big, t_small = medians[big] * 1e3, medians[small] * 1e3
            detail = f"1,000 commits {t_big:.3f} ms, 10 commits {t_small:.3f} ms (median of {REPEATS})"
            results.append(
                {
                    "name": f"sensor poke {label}, 1,000 / 10 commits, checkpoint every {interval}",
                    "ratio": t_big / t_small,
                    "goal": "<= 1.5",
                    "detail": detail,
                }
            )
    return results
