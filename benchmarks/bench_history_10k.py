"""History at 10,000 commits: a year of hourly partitions, and the cost of a date stays that of day 10.

``benchmarks.history_hourly`` writes the year (8,760 hourly partitions, 1,240 restatements) locally;
its log and history index are then copied to the fake S3 (moto's server on loopback, its request recorder on).
The control plane of an unchanged re-run of one hour (hour 12 of the day) is what the history index
serves: the re-run check's lookup of the partition's last write and its recorded facts
(``rerun_facts.last_write``), the partition's pin (``partition_commit``) and the day's cut-off pin
(``cutoff_commit``, ``ds <= D``). It is timed at day 10 and at day 364 (the last), both on the
finished year, and on S3 its storage requests are counted by the server.

Figures: cost at day 364 / day 10, locally and on S3 (goal <= 1.5); S3 requests at day 364 / day 10
(goal <= 1.1) and at day 364 / ``REQUEST_BOUND`` (goal <= 1: the bound); ``head.json`` bytes /
64 KiB (goal <= 1); the generator's wall time / 15 minutes (goal <= 1). The detail lines give the
head's size and load time beside those of the one-file index (format 2) the same writes would make.
``DLTRAIN_BENCH_HISTORY_COMMITS`` shortens the year (hours = commits x 0.876).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from benchmarks.history_hourly import HourlyYear, generate

ROUNDS = 15
# Storage requests of one hour's unchanged re-run, whatever the history: each of its 3 index loads
# reads head.json, _last_checkpoint and probes the next commit (2 requests each: pyarrow asks for
# the size first), and at most 2 segments; then 1 commit file: 3 x (2 + 2 + 2 + 4) + 2.
REQUEST_BOUND = 32
HEAD_LIMIT = 64 * 1024
GENERATOR_LIMIT_S = 15 * 60


def control(year: HourlyYear, day: int, storage_options: dict[str, str] | None) -> tuple[int, int, int]:
    """The history-index reads of an unchanged re-run of hour 12 of ``day`` (nothing written): the
    versions of the partition's last write, of its pin and of the day's cut-off pin."""
    from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit
    from airflow_provider_dltrain.lake.rerun_facts import last_write

    partition = year.partition(day * 24 + 12)
    last = last_write(year.uri, partition, storage_options)
    if last is None:
        raise RuntimeError(f"{year.uri}: no write of {partition} found; the year is not what was generated")
    pinned = partition_commit(year.uri, partition, storage_options=storage_options)
    cutoff = cutoff_commit(year.uri, {"ds": year.ds(day)}, storage_options=storage_options)
    return last.ref.version, pinned.version, cutoff.version


def _cost(year: HourlyYear, day: int, storage_options: dict[str, str] | None) -> float:
    control(year, day, storage_options)  # warm: imports, the first reads
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        control(year, day, storage_options)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _heads(root: str) -> str:
    """The head's size and load time, beside the one-file (format 2) index of the same writes."""
    from airflow_provider_dltrain.lake import history_index

    path = os.path.join(root, history_index.HEAD)
    with open(path) as f:
        head = f.read()
    full = history_index.load(root)
    assert full is not None
    legacy = {**json.loads(head), "format": 2}
    legacy["partitions"] = [[dict(k), [w.to_json() for w in ws]] for k, ws in full.writes.items()]
    legacy_text = json.dumps(legacy, separators=(",", ":"))

    def load_ms(text: str) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            history_index.HistoryIndex.from_json(root, json.loads(text))
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    segments = len(json.loads(head)["segments"])
    return (
        f"head.json {len(head):,} bytes ({segments} segment summaries), parsed in {load_ms(head):.2f} ms; "
        f"the one-file index of the same writes {len(legacy_text):,} bytes, {load_ms(legacy_text):.1f} ms"
    )


def _local(year: HourlyYear, last: int) -> list[dict[str, Any]]:
    early, late = _cost(year, 10, None), _cost(year, last, None)
    from airflow_provider_dltrain.lake import history_index

    head_bytes = os.path.getsize(os.path.join(year.uri, history_index.HEAD))
    return [
        {
            "name": f"history 10k: an hour's unchanged re-run, day {last} / day 10 (local)",
            "ratio": late / early,
            "goal": "<= 1.5",
            "detail": f"({late * 1000:.1f} ms vs {early * 1000:.1f} ms, medians of {ROUNDS}; {_heads(year.uri)})",
        },
        {
            "name": "history 10k: head.json bytes / 64 KiB",
            "ratio": head_bytes / HEAD_LIMIT,
            "goal": "<= 1.0",
            "detail": f"({head_bytes:,} bytes)",
        },
    ]


def _s3(year: HourlyYear, last: int) -> list[dict[str, Any]]:
    """The same year on the fake S3: its log and its history index, copied (the re-run reads no data
    file; it gives the same versions as locally, checked)."""
    import pyarrow.fs as pafs

    from airflow_provider_dltrain.lake.log import DeltaLog
    from airflow_provider_dltrain.testing.s3_recorder import recording_s3

    with tempfile.TemporaryDirectory(prefix="bench-history-10k-s3-") as home, recording_s3(home) as s3:
        s3.create_bucket("hourly")
        remote = HourlyYear("s3://hourly/year")
        fs, root = DeltaLog(remote.uri, s3.storage_options).filesystem
        started = time.perf_counter()
        for folder in ("_delta_log", "_dltrain_history"):
            pafs.copy_files(os.path.join(year.uri, folder), f"{root}/{folder}", pafs.LocalFileSystem(), fs)
        copied = time.perf_counter() - started
        so = s3.storage_options
        for day in (10, last):
            if control(remote, day, so) != control(year, day, None):
                raise RuntimeError(f"day {day}: the copy on S3 answers differently from the local year")
        early_n = len(s3.requests(lambda: control(remote, 10, so)))
        late_n = len(s3.requests(lambda: control(remote, last, so)))
        early, late = _cost(remote, 10, so), _cost(remote, last, so)
    return [
        {
            "name": f"history 10k: an hour's unchanged re-run, day {last} / day 10 (fake S3)",
            "ratio": late / early,
            "goal": "<= 1.5",
            "detail": f"({late * 1000:.1f} ms vs {early * 1000:.1f} ms, medians of {ROUNDS}; copy {copied:.0f}s)",
        },
        {
            "name": f"history 10k: S3 requests of that re-run, day {last} / day 10",
            "ratio": late_n / early_n,
            "goal": "<= 1.1",
            "detail": f"({late_n} vs {early_n} requests)",
        },
        {
            "name": f"history 10k: S3 requests of that re-run at day {last} / {REQUEST_BOUND} (the bound)",
            "ratio": late_n / REQUEST_BOUND,
            "goal": "<= 1.0",
            "detail": f"({late_n} requests)",
        },
    ]


def run() -> list[dict[str, Any]]:
    from benchmarks import history_hourly

    commits = int(os.environ.get("DLTRAIN_BENCH_HISTORY_COMMITS", history_hourly.COMMITS))
    hours = history_hourly.HOURS * commits // history_hourly.COMMITS
    last = hours // 24 - 1
    with tempfile.TemporaryDirectory(prefix="bench-history-10k-") as home:
        year = generate(
            os.path.join(home, "year"), commits, hours, progress=lambda m: print(f"   {m}", flush=True)
        )
        print(
            f"   generator {year.seconds:.0f}s (index built from the log in {year.index_build_s:.1f}s; "
            f"the writer's commit on the last day {year.writer_ms:.0f} ms)",
            flush=True,
        )
        results = _local(year, last)
        results.append(
            {
                "name": f"history 10k: generator wall time, {commits} commits / 15 min",
                "ratio": year.seconds / GENERATOR_LIMIT_S,
                "goal": "<= 1.0",
                "detail": f"({year.seconds:.0f}s; the provider's commit at the end {year.writer_ms:.0f} ms)",
            }
        )
        results += _s3(year, last)
    return results
