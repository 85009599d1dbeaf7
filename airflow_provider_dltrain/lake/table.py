"""Resolve table versions: newest, as of a time, and whether a version holds a partition."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_provider_dltrain.exceptions import SchemaMismatchError, TableNotFoundError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri


def open_table(uri: str, version: int | None = None, storage_options: StorageOptions | None = None) -> Any:
    """Open a ``deltalake.DeltaTable`` (at ``version`` when given) or raise ``TableNotFoundError``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError as DeltaNotFound

    try:
        return DeltaTable(normalize_uri(uri), version=version, storage_options=storage_options or None)
    except DeltaNotFound as err:
        raise TableNotFoundError(f"no Delta table at {uri}: run the task that creates it first") from err
    except Exception as err:
        if version is not None and "version" in str(err).lower():
            raise TableNotFoundError(f"{uri} has no version {version}: {err}") from err
        raise


def latest(uri: str, storage_options: StorageOptions | None = None) -> DeltaRef:
    """The newest version of the table."""
    log = DeltaLog(uri, storage_options)
    version = log.latest_version()
    if version is None:
        raise TableNotFoundError(f"no Delta table at {uri}: run the task that creates it first")
    return log.ref(version)


def ref_at(uri: str, version: int, storage_options: StorageOptions | None = None) -> DeltaRef:
    """A ``DeltaRef`` for an existing version (commit timestamp filled in)."""
    return DeltaLog(uri, storage_options).ref(version)


def as_of(uri: str, when: datetime, storage_options: StorageOptions | None = None) -> DeltaRef:
    """The version that was current at ``when`` (the newest commit at or before it)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    log = DeltaLog(uri, storage_options)
    newest = log.latest_version()
    if newest is None:
        raise TableNotFoundError(f"no Delta table at {uri}")
    target = when.timestamp() * 1000
    # commit timestamps are monotonic in practice; binary search over the commit files
    low, high = 0, newest
    if (log.commit_info(0).get("timestamp") or 0) > target:
        raise TableNotFoundError(f"{uri} did not exist yet at {when.isoformat()}")
    while low < high:
        mid = (low + high + 1) // 2
        if (log.commit_info(mid).get("timestamp") or 0) <= target:
            low = mid
        else:
            high = mid - 1
    return DeltaRef(log.uri, low, millis_to_iso(log.commit_info(low).get("timestamp")))


def has_partition(
    uri: str, version: int, partition: dict[str, str], storage_options: StorageOptions | None = None
) -> bool:
    """Whether ``version`` of the table has at least one file in ``partition``.

    Cheap at the newest version: the commits since the last checkpoint and that checkpoint's
    partition columns (see :meth:`DeltaLog.has_partition`), whatever the length of the history.
    """
    wanted = [(c, str(v)) for c, v in part.key(partition)]
    present = DeltaLog(uri, storage_options).has_partition(version, wanted)
    if present is None:  # unusual log layout: ask delta-rs
        table = open_table(uri, version, storage_options)
        return bool(table.file_uris(file_pruning_predicate=part.filters(partition)))
    return present


def active_files(
    uri: str, version: int, storage_options: StorageOptions | None = None, filters: Any = None
) -> list[str]:
    """Absolute URIs of the data files of exactly ``version`` (optionally partition-filtered)."""
    return list(open_table(uri, version, storage_options).file_uris(file_pruning_predicate=filters or None))


# Reader features a plain Parquet read of the version's files honours: deletion vectors are applied
# by ``VersionScan`` (deleted row indices per file); the others only change how the log is stored
# (resolved by delta-rs) or add Parquet types pyarrow reads as they are. Anything else (column
# mapping above all: physical column names differ from the table's) is refused, naming it.
_SCANNABLE_READER_FEATURES = frozenset(
    {
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)


@dataclass(frozen=True)
class ScanFile:
    """One data file of a version: where it is, its partition values, the rows its deletion vector drops."""

    uri: str
    partition: tuple[tuple[str, str | None], ...] = ()
    deleted_rows: tuple[int, ...] = ()


@dataclass(frozen=True)
class VersionScan:
    """Exactly the rows of one version: its files (deletion vectors resolved) and its Arrow schema."""

    ref: DeltaRef
    schema: Any  # pyarrow.Schema
    partition_columns: tuple[str, ...]
    files: tuple[ScanFile, ...]

    @property
    def deleted_rows(self) -> int:
        return sum(len(f.deleted_rows) for f in self.files)


def scan_version(
    ref: DeltaRef, storage_options: StorageOptions | None = None, filters: Any = None
) -> VersionScan:
    """The files of exactly ``ref``'s version that ``filters`` (delta-rs DNF tuples) can select.

    Files are pruned by delta-rs (partition values and file statistics); each keeps the row indices
    its deletion vector removes, so a reader of the Parquet files returns the version's rows and
    not the deleted ones. Raises :class:`SchemaMismatchError` for reader features a Parquet read
    cannot honour (column mapping), naming the table, the version and the feature.
    """
    import pyarrow as pa

    table = open_table(ref.uri, ref.version, storage_options)
    _require_scannable(table, ref)
    root = normalize_uri(ref.uri)
    partition_columns = tuple(table.metadata().partition_columns)
    selected = set(table.file_uris(file_pruning_predicate=filters or None))
    actions = pa.table(table.get_add_actions(flatten=True))
    values = {c: actions.column(f"partition.{c}").to_pylist() for c in partition_columns}
    deleted = _deleted_rows(table) if "deletionVectors" in _reader_features(table) else {}
    files = []
    for i, path in enumerate(actions.column("path").to_pylist()):
        uri = f"{root}/{unquote(path)}"
        if uri in selected:
            partition = tuple((c, _text(values[c][i])) for c in partition_columns)
            files.append(ScanFile(uri, partition, deleted.get(uri, ())))
    if len(files) != len(selected):  # a path layout this pairing does not understand: never guess
        raise TableNotFoundError(
            f"{ref.uri} version {ref.version}: could not pair {len(selected)} selected file(s) with the log"
        )
    schema = pa.schema(table.schema().to_arrow())
    return VersionScan(ref, schema, partition_columns, tuple(sorted(files, key=lambda f: f.uri)))


def _reader_features(table: Any) -> set[str]:
    return set(table.protocol().reader_features or ())


def _require_scannable(table: Any, ref: DeltaRef) -> None:
    blocked = sorted(_reader_features(table) - _SCANNABLE_READER_FEATURES)
    mode = (table.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if mode not in (None, "none") and "columnMapping" not in blocked:
        blocked.append("columnMapping")
    if blocked:
        raise SchemaMismatchError(
            f"{ref.uri} version {ref.version} uses Delta reader feature(s) {blocked}, which this reader "
            "cannot honour (with column mapping the Parquet files hold physical, not logical, column "
            "names). Rewrite the table without them before reading it here."
        )


def _deleted_rows(table: Any) -> dict[str, tuple[int, ...]]:
    """Row indices each file's deletion vector removes, keyed like ``file_uris`` names the file."""
    import numpy as np
    import pyarrow as pa

    out: dict[str, tuple[int, ...]] = {}
    for batch in pa.RecordBatchReader.from_stream(table.deletion_vectors()):
        for filepath, keep in zip(
            batch.column("filepath").to_pylist(), batch.column("selection_vector").to_pylist(), strict=True
        ):
            # A selection vector may be shorter than the file: rows past its end are kept.
            dropped = np.flatnonzero(~np.asarray(keep, dtype=bool))
            out[_file_key(filepath)] = tuple(int(i) for i in dropped)
    return out


def _file_key(url: str) -> str:
    """``file:///t/ds=a%20b/x.parquet`` → ``/t/ds=a b/x.parquet``; ``s3://b/k`` kept as ``s3://b/k``."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return normalize_uri(f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
