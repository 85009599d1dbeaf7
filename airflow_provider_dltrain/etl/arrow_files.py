"""Executor side of the Spark → Delta writer: Arrow batches in, Parquet data files out.

Runs inside Spark Python workers through ``mapInArrow``. Each task writes its good rows into the
table's partition directory and its bad rows into the quarantine table's, then yields one small row
of metadata per file (path, size, row count, Delta stats, bad-row reasons). Nothing is committed here.
Each task also keeps a content digest state of the good rows and of the bad rows it wrote (data
columns only) and sends it with its first file of each kind; the driver merges them to compare
the new content with the partition's (:mod:`~airflow_provider_dltrain.lake.digest`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.digest import DigestState

MAX_ROWS_PER_FILE = 2_000_000
RECORD_PREVIEW_CHARS = 2_000


def QUARANTINE_FIELDS() -> list[Any]:
    import pyarrow as pa

    return [
        pa.field("source_file", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("record", pa.string()),
    ]


def _result_arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("kind", pa.string()),
            ("path", pa.string()),
            ("size", pa.int64()),
            ("num_records", pa.int64()),
            ("stats", pa.string()),
            ("mtime", pa.int64()),
            ("reasons", pa.map_(pa.string(), pa.int64())),
            ("mismatched", pa.int64()),
            ("digest", pa.string()),  # JSON DigestState of all this task's rows of this kind
        ]
    )


def result_schema() -> str:
    return (
        "kind string, path string, size long, num_records long, stats string, mtime long, "
        "reasons map<string,long>, mismatched long, digest string"
    )


class _FileSink:
    """Writes batches to rolling Parquet files under one directory and remembers what it wrote."""

    def __init__(self, fs: Any, root: str, rel_dir: str, prefix: str, schema: Any) -> None:
        self.fs, self.root, self.rel_dir, self.prefix, self.schema = fs, root, rel_dir, prefix, schema
        self.writer: Any = None
        self.rel_path = ""
        self.rows = 0
        self.done: list[tuple[str, int]] = []

    def write(self, table: Any) -> None:
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return
        if self.writer is None:
            self.rel_path = f"{self.rel_dir}/part-{self.prefix}-{len(self.done):05d}.snappy.parquet"
            self.fs.create_dir(f"{self.root}/{self.rel_dir}", recursive=True)
            stream = self.fs.open_output_stream(f"{self.root}/{self.rel_path}")
            self.writer = pq.ParquetWriter(stream, self.schema, compression="snappy")
            self._stream = stream
        self.writer.write_table(table)
        self.rows += table.num_rows
        if self.rows >= MAX_ROWS_PER_FILE:
            self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self._stream.close()
            self.done.append((self.rel_path, self.rows))
            self.writer, self.rows = None, 0

    def results(
        self, kind: str, digest: DigestState, reasons: dict[str, int] | None = None
    ) -> Iterator[dict[str, Any]]:
        import pyarrow.parquet as pq

        self.close()
        for i, (rel_path, rows) in enumerate(self.done):
            full = f"{self.root}/{rel_path}"
            info = self.fs.get_file_info(full)
            with self.fs.open_input_file(full) as handle:
                meta = pq.read_metadata(handle)
            mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
            yield {
                "kind": kind,
                "path": rel_path,
                "size": int(info.size),
                "num_records": rows,
                "stats": delta_stats(meta, self.schema),
                "mtime": mtime,
                "reasons": reasons or {},
                "mismatched": 0,
                # once per task and kind: the driver sums the states, a copy per file would count twice
                "digest": json.dumps(digest.to_dict()) if i == 0 else None,
            }


def _json_value(value: Any) -> Any:
    import datetime as dt
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None  # not valid JSON, and a useless bound for data skipping
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dt.datetime):  # Delta stats: ISO-8601 in UTC with a Z suffix
        value = value.astimezone(dt.timezone.utc) if value.tzinfo else value
        return value.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def delta_stats(meta: Any, schema: Any) -> str:
    """Delta ``stats`` JSON (numRecords, min/max/nullCount of top-level primitive columns)."""
    import pyarrow as pa

    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    primitive = {f.name for f in schema if not pa.types.is_nested(f.type) and not pa.types.is_binary(f.type)}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for ci in range(group.num_columns):
            col = group.column(ci)
            name = col.path_in_schema
            if name not in primitive or col.statistics is None:
                continue
            st = col.statistics
            nulls[name] = nulls.get(name, 0) + int(st.null_count or 0)
            if st.has_min_max:
                lo, hi = _json_value(st.min), _json_value(st.max)
                if lo is None or hi is None:
                    continue
                mins[name] = lo if name not in mins else min(mins[name], lo)
                maxs[name] = hi if name not in maxs else max(maxs[name], hi)
    return json.dumps({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _quarantine_batch(bad: Any, partition_cols: set[str]) -> Any:
    import pyarrow as pa

    rows = bad.to_pylist()
    sources, reasons, records = [], [], []
    for row in rows:
        reasons.append(str(row.pop("_error")))
        sources.append(row.get("source_file") or row.get("path"))
        preview = {
            k: _json_value(v) for k, v in row.items() if k not in partition_cols and not isinstance(v, bytes)
        }
        records.append(json.dumps(preview, default=str)[:RECORD_PREVIEW_CHARS])
    return pa.table(
        {"source_file": pa.array(sources, pa.string()), "reason": reasons, "record": records},
        schema=pa.schema(QUARANTINE_FIELDS()),
    )


def file_writer_fn(
    *,
    table_uri: str,
    quarantine_uri: str,
    rel_dir: str,
    write_id: str,
    data_schema: Any,
    partition: dict[str, str],
    has_error_column: bool,
    storage_options: dict[str, str],
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Build the ``mapInArrow`` function for one write (a plain closure: it is pickled to workers)."""

    def write_files(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from airflow_provider_dltrain.lake.digest import DigestState
        from airflow_provider_dltrain.lake.storage import filesystem

        fs, troot = filesystem(table_uri, storage_options)
        _, qroot = filesystem(quarantine_uri, storage_options)
        task = uuid.uuid4().hex[:12]
        good = _FileSink(fs, troot, rel_dir, f"{write_id}-{task}", data_schema)
        bad = _FileSink(fs, qroot, rel_dir, f"{write_id}-{task}", pa.schema(QUARANTINE_FIELDS()))
        reasons: Counter[str] = Counter()
        mismatched = 0
        good_state, bad_state = DigestState(), DigestState()
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for col, val in partition.items():
                if col in table.column_names:
                    equal = pc.fill_null(pc.equal(table.column(col).cast(pa.string()), val), False)
                    mismatched += table.num_rows - (pc.sum(equal).as_py() or 0)
            if has_error_column:
                is_bad = pc.is_valid(table.column("_error"))
                bad_rows = table.filter(is_bad)
                if bad_rows.num_rows:
                    reasons.update(str(r) for r in bad_rows.column("_error").to_pylist())
                    quarantined = _quarantine_batch(bad_rows, set(partition))
                    bad_state.update(quarantined)
                    bad.write(quarantined)
                table = table.filter(pc.invert(is_bad))
            rows = table.select(data_schema.names).cast(data_schema)
            good_state.update(rows)
            good.write(rows)
        results = [*good.results("good", good_state), *bad.results("bad", bad_state, dict(reasons))]
        if mismatched:
            results.append(
                {
                    "kind": "mismatch",
                    "path": "",
                    "size": 0,
                    "num_records": 0,
                    "stats": "",
                    "mtime": 0,
                    "reasons": {},
                    "mismatched": mismatched,
                    "digest": None,
                }
            )
        schema = _result_arrow_schema()
        for row in results:
            row["reasons"] = list(row["reasons"].items())
            yield pa.RecordBatch.from_pylist([row], schema=schema)

    return write_files


def refused_file_results(
    table_uri: str,
    quarantine_uri: str,
    rel_dir: str,
    write_id: str,
    partition: dict[str, str],
    storage_options: Mapping[str, str] | None,
    refused: Sequence[Any],
) -> list[dict[str, Any]]:
    """One quarantine row per landed file not read (``path``, ``reason``), written where it runs (the
    driver) by the executors' file writer (same Parquet, stats and digest); its result rows."""
    if not refused:
        return []
    import pyarrow as pa

    write_files = file_writer_fn(
        table_uri=table_uri,
        quarantine_uri=quarantine_uri,
        rel_dir=rel_dir,
        write_id=write_id,
        data_schema=pa.schema([]),
        partition=partition,
        has_error_column=True,
        storage_options=dict(storage_options or {}),
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "source_file": [r.path for r in refused],
            "_error": [r.reason for r in refused],
            "landing": ["not read"] * len(refused),
        }
    )
    rows = [row for out in write_files(iter([batch])) for row in out.to_pylist()]
    return [{**row, "reasons": dict(row["reasons"] or [])} for row in rows]  # a map, as Spark gives it
