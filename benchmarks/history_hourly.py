"""A year of hourly partitions in one table: 10,000 commits, as the provider's writer commits them.

8,760 hourly partitions (``ds``, ``hour``) written in order, and 1,240 restatements of an hour one
to three days back (late data), spread over the year: 10,000 commits. Each commit is what
``lake.overwrite_partition`` commits (its first commit is one, and the others copy its
``commitInfo``: the claimed partition, the content digest, the Airflow lineage keys, a ``txn``):
an ``add`` of one Parquet file written by pyarrow, and for a restatement the ``remove`` of the file
it replaces. Writing the log directly keeps the year to minutes on 2 cores; delta-rs then
checkpoints it, and the provider's index is built from it by the provider's own catch-up
(``history_index.update``). The last 24 commits are written through ``lake.overwrite_partition``
itself, so the index at the end is the one the writer keeps up to date, commit by commit.

The history index has to answer a date here from 8,760 partitions in one table, where a year of
daily partitions of 27 tables gives each table's index 365: this is the harder of the two.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

COMMITS = 10_000
HOURS = 8_760
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


@dataclass
class HourlyYear:
    uri: str
    seconds: float = 0.0  # generator wall time
    index_build_s: float = 0.0  # the provider's catch-up of the whole log into its index
    writer_ms: float = 0.0  # median time of one lake.overwrite_partition on the last day

    @staticmethod
    def partition(hour: int) -> dict[str, str]:
        when = START + timedelta(hours=hour)
        return {"ds": when.strftime("%Y-%m-%d"), "hour": when.strftime("%H")}

    @staticmethod
    def ds(day: int) -> str:
        return (START + timedelta(days=day)).strftime("%Y-%m-%d")


def schedule(commits: int = COMMITS, hours: int = HOURS) -> Iterator[int]:
    """The hour each commit writes, in commit order: every hour once, plus restatements spread evenly."""
    extra = commits - hours
    restated = 0
    for hour in range(hours):
        yield hour
        while restated < extra and (restated + 1) * hours <= (hour + 1) * extra and hour >= 96:
            restated += 1
            yield hour - 24 * (1 + restated % 3) - restated % 24 // 2


def _rows(hour: int, version: int) -> pa.Table:
    return pa.table({"x": pa.array([hour * 7 + version % 5], pa.int64())})


def _digest(table: pa.Table) -> str:
    return hashlib.sha256(table.to_pylist().__repr__().encode()).hexdigest()


def _commit(root: str, version: int, hour: int, live: dict[str, str], template: dict) -> None:
    """Commit ``version``: the partition of ``hour`` replaced by one new file (the writer's actions)."""
    values = HourlyYear.partition(hour)
    rows = _rows(hour, version)
    rel = f"ds={values['ds']}/hour={values['hour']}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
    pq.write_table(rows, os.path.join(root, rel))
    when = int((START + timedelta(hours=hour + 1)).timestamp() * 1000) + version
    key = json.dumps(values, separators=(",", ":"))
    info = {
        **template,
        "timestamp": when,
        "operationParameters": {
            **template["operationParameters"],
            "predicate": f"ds = '{values['ds']}' AND hour = '{values['hour']}'",
        },
        "dltrain.partition": key,
        "dltrain.content_digest": _digest(rows),
        **_lineage(hour),
    }
    actions = [{"commitInfo": info}]
    if key in live:
        actions.append(
            {
                "remove": {
                    "path": live[key],
                    "dataChange": True,
                    "deletionTimestamp": when,
                    "extendedFileMetadata": True,
                    "partitionValues": values,
                    "size": 400,
                }
            }
        )
    stats = {
        "numRecords": 1,
        "minValues": {"x": rows["x"][0].as_py()},
        "maxValues": {"x": rows["x"][0].as_py()},
        "nullCount": {"x": 0},
    }
    actions.append(
        {
            "add": {
                "path": rel,
                "partitionValues": values,
                "size": os.path.getsize(os.path.join(root, rel)),
                "modificationTime": when,
                "dataChange": True,
                "stats": json.dumps(stats, separators=(",", ":")),
            }
        }
    )
    actions.append({"txn": {"appId": f"dltrain/partition/{key}", "version": when * 1000}})
    live[key] = rel
    path = os.path.join(root, "_delta_log", f"{version:020d}.json")
    with open(path, "w") as out:
        out.write("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")


def _lineage(hour: int) -> dict[str, str]:
    from airflow_provider_dltrain import lake

    run_id = f"scheduled__{(START + timedelta(hours=hour)).isoformat()}"
    return lake.commit_metadata(dag_id="hourly_ingest", run_id=run_id, task_id="ingest", try_number=1)


def generate(
    root: str, commits: int = COMMITS, hours: int = HOURS, progress: Callable[[str], None] | None = None
) -> HourlyYear:
    """Write the year under ``root`` (a local folder); see the module."""
    from deltalake import DeltaTable

    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.lake import history_index

    began = time.perf_counter()
    year = HourlyYear(root)
    order = list(schedule(commits, hours))
    direct, last_day = order[:-24], order[-24:]  # the last 24 commits through the writer itself
    lake.overwrite_partition(
        root, _rows(direct[0], 0), year.partition(direct[0]), metadata=_lineage(direct[0])
    )
    with open(os.path.join(root, "_delta_log", f"{0:020d}.json")) as first:
        actions = [json.loads(line) for line in first if line.strip()]
    template = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    template = {k: v for k, v in template.items() if not k.startswith(("dltrain.", "airflow."))}
    first_file = next(a["add"]["path"] for a in actions if "add" in a)
    live = {json.dumps(year.partition(direct[0]), separators=(",", ":")): first_file}
    for version, hour in enumerate(direct[1:], start=1):
        _commit(root, version, hour, live, template)
        if progress and version % 2000 == 0:
            progress(f"{version} commits ({time.perf_counter() - began:.0f}s)")
    DeltaTable(root).create_checkpoint()
    started = time.perf_counter()
    history_index.update(root)
    year.index_build_s = time.perf_counter() - started
    times = []
    for version, hour in enumerate(last_day, start=len(direct)):
        started = time.perf_counter()
        lake.overwrite_partition(root, _rows(hour, version), year.partition(hour), metadata=_lineage(hour))
        times.append(time.perf_counter() - started)
    year.writer_ms = sorted(times)[len(times) // 2] * 1000
    year.seconds = time.perf_counter() - began
    return year
