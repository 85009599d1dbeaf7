"""Order-independent content digests of Delta partitions: same rows, same digest, whatever the files.

Every row hashes to 64 bits over all its columns (taken in column-name order, so the column order of
a file does not matter). A partition's digest is a multiset hash of its rows: the row count and two
wrapping sums of differently mixed row hashes. Sums commute, so neither the order of the rows, nor
their split into files, nor which Spark task hashed them changes the digest, while a row written
twice counts twice. Executors keep a :class:`DigestState` per task; the driver merges them.

Hashes are built from bit patterns, blake2b and fixed constants, never Python's ``hash()``, so a
digest is the same in every process and on every machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.lake.partition import META_DIGEST, META_PARTITION, canonical_partition
from airflow_provider_dltrain.lake.row_hash import (
    _ALGORITHM,
    _MASK,
    _SUM_B_SEED,
    _fmix,
    _mix,
    canonical_schema,
    row_hashes,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from airflow_provider_dltrain.lake.storage import StorageOptions

# Commit metadata keys written by every partition overwrite of this provider: META_DIGEST and
# META_PARTITION (in lake/partition.py, which lake/history reads without importing this module).


@dataclass
class DigestState:
    """Running multiset hash of rows: combine partial states from many executors in any order."""

    rows: int = 0
    sum_a: int = 0
    sum_b: int = 0

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        import numpy as np

        hashes = row_hashes(data)
        self.rows += len(hashes)
        self.sum_a = (self.sum_a + int(_mix(hashes).sum(dtype=np.uint64))) & _MASK
        self.sum_b = (self.sum_b + int(_fmix(hashes ^ np.uint64(_SUM_B_SEED)).sum(dtype=np.uint64))) & _MASK

    def merge(self, other: DigestState) -> DigestState:
        return DigestState(
            self.rows + other.rows, (self.sum_a + other.sum_a) & _MASK, (self.sum_b + other.sum_b) & _MASK
        )

    def to_dict(self) -> dict[str, Any]:
        # sums as decimal strings: they exceed a JSON reader's or Spark's signed 64-bit integers
        return {"rows": self.rows, "sum_a": str(self.sum_a), "sum_b": str(self.sum_b)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DigestState:
        return cls(
            int(data.get("rows", 0)), int(data.get("sum_a", 0)) & _MASK, int(data.get("sum_b", 0)) & _MASK
        )

    def hexdigest(self, schema: pa.Schema) -> str:
        """sha256 hex of the schema (names + normalised types, partition columns excluded) and the rows."""
        text = f"{_ALGORITHM}|{canonical_schema(schema)}|{self.rows}:{self.sum_a:016x}:{self.sum_b:016x}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def content_digest(self, schema: pa.Schema) -> str | None:
        """:meth:`hexdigest`, or ``None`` for no rows: every empty partition is alike, whatever its schema."""
        return self.hexdigest(schema) if self.rows else None


# -- digests of committed partitions ------------------------------------------------------------
def _fs_path(file_uri: str) -> str:
    return file_uri.split("://", 1)[1] if "://" in file_uri else file_uri


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly ``schema``'s columns: a column added to the table later reads as null."""
    import pyarrow as pa

    columns = [
        data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in schema
    ]
    return pa.table(columns, names=schema.names)


def state_of_files(
    fs: pafs.FileSystem,
    paths: Iterable[str],
    schema: pa.Schema,
    deleted: Mapping[str, Sequence[int]] | None = None,
) -> DigestState:
    """The digest state of Parquet files' rows, one file in memory at a time.

    ``deleted`` maps a path to the row indices its deletion vector removes: those rows do not count.
    """
    import pyarrow.parquet as pq

    from airflow_provider_dltrain.lake.reader import drop_rows

    state = DigestState()
    for path in paths:
        with fs.open_input_file(path) as handle:
            data = pq.read_table(handle)
        dropped = (deleted or {}).get(path)
        if dropped:
            data = drop_rows(data, sorted(dropped))
        state.update(_conform(data, schema))
    return state


def _computed_digest(
    uri: str, version: int, spec: Mapping[str, str], storage_options: StorageOptions | None
) -> str | None:
    """Digest of the partition's rows at ``version``, read back (partition columns left out).

    Read through the version's scan, so rows a deletion vector removed do not count: a partition
    whose rows another engine deleted must not look "unchanged" to a write restoring them.
    """
    import pyarrow as pa

    from airflow_provider_dltrain.lake import partition as part
    from airflow_provider_dltrain.lake.reader import scan_version
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.lake.storage import filesystem, normalize_uri

    scan = scan_version(DeltaRef(normalize_uri(uri), version), storage_options, part.filters(dict(spec)))
    schema = pa.schema([f for f in scan.schema if f.name not in scan.partition_columns])
    fs, _ = filesystem(uri, storage_options)
    paths = [_fs_path(f.uri) for f in scan.files]
    deleted = {_fs_path(f.uri): f.deleted_rows for f in scan.files}
    return state_of_files(fs, paths, schema, deleted).content_digest(schema)


def digests_and_commits(
    uri: str,
    version: int,
    partitions: Iterable[Mapping[str, object]],
    storage_options: StorageOptions | None = None,
    *,
    live: bool = False,
) -> dict[str, tuple[str | None, int | None]]:
    """``{partition path: (digest, version of the commit that last wrote it)}``; the version is
    ``None`` when the partition has no rows or its last write is older than the retained log.
    """
    from airflow_provider_dltrain.lake import history
    from airflow_provider_dltrain.lake import partition as part
    from airflow_provider_dltrain.lake.log import DeltaLog
    from airflow_provider_dltrain.lake.table import has_partition

    specs = {}
    for partition in partitions:
        spec = part.validate_partition(partition)
        specs[part.path_of(spec, sorted(spec))] = spec
    result: dict[str, tuple[str | None, int | None]] = {path: (None, None) for path in specs}
    # a partition with no live file has no digest; ``live``: the caller took them from the version's files
    live_specs = (
        dict(specs)
        if live
        else {
            path: spec for path, spec in specs.items() if has_partition(uri, version, spec, storage_options)
        }
    )
    log = DeltaLog(uri, storage_options)
    writes = history.newest_writes(
        log, version, [history.key_of(s) for s in live_specs.values()], "partitions", stop_at_gap=True
    )
    for path, spec in live_specs.items():
        commit = writes.get(history.key_of(spec))
        recorded = commit.info if commit is not None else {}
        digest = recorded.get(META_DIGEST)
        if not digest or recorded.get(META_PARTITION) != canonical_partition(spec):
            # written before digests were recorded, by another tool, or its commit is gone
            digest = _computed_digest(uri, version, spec, storage_options)
        result[path] = (digest, commit.version if commit is not None else None)
    return result


def partition_digest(
    uri: str,
    version: int,
    partition: Mapping[str, object],
    storage_options: StorageOptions | None = None,
) -> str | None:
    """Digest of ``partition`` as it stands at ``version``: recorded by the commit that wrote it, or
    computed from its live files when that commit recorded none. ``None`` when the partition has no rows.
    """
    return next(iter(partition_digests(uri, version, [partition], storage_options).values()))


def partition_digests(
    uri: str,
    version: int,
    partitions: Iterable[Mapping[str, object]],
    storage_options: StorageOptions | None = None,
    *,
    live: bool = False,
) -> dict[str, str | None]:
    """``{partition path ("ds=2026-11-24"): digest}`` for many partitions, from the history index.

    A path names the partition's columns in name order. ``live``: every partition has files at
    ``version`` (the caller listed them), so none is checked.
    """
    found = digests_and_commits(uri, version, partitions, storage_options, live=live)
    return {path: digest for path, (digest, _) in found.items()}
