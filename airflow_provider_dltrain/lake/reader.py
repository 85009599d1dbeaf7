"""The one reader of a pinned Delta version: which files hold its rows, and those rows read back.

Every consumer (ETL inputs, the training loader in both modes, the promotion gate, scoring, the
content digests) reads a version through this module, in two steps:

* :func:`scan_version` (delta-rs; the launching process or the Spark driver only) lists the files
  of exactly one version that a filter can select, each with the row indices its deletion vector
  removes. Reader features a Parquet read cannot honour (column mapping) are refused here, with one
  message for every consumer.
* :func:`read_file`, :func:`read_files` and :func:`iter_file_batches` (pyarrow only: safe in forked
  DataLoader workers, DDP ranks and Spark executors) read those files back: deleted rows dropped,
  partition values filled in with the table's types, the filter applied to rows, only the selected
  columns. Filters are the DNF lists of :mod:`.filters`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from airflow_provider_dltrain.exceptions import SchemaMismatchError, TableNotFoundError
from airflow_provider_dltrain.lake.filters import DNF, filter_columns, filter_expression, partition_expression
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, normalize_uri

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

Partition = tuple[tuple[str, str | None], ...]

# Reader features a plain Parquet read of the version's files honours: deletion vectors are applied
# by this reader (deleted row indices per file); the others only change how the log is stored
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
_ROWS_PER_BATCH = 65_536


@dataclass(frozen=True)
class ScanFile:
    """One data file of a version: where it is, its partition values, the rows its deletion vector drops."""

    uri: str
    partition: Partition = ()
    deleted_rows: tuple[int, ...] = ()  # sorted row indices in the Parquet file
    num_records: int | None = None  # rows in the file (deleted ones included), when the log records it


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
    ref: DeltaRef,
    storage_options: StorageOptions | None = None,
    filters: Any = None,
    *,
    rows_of: Any = None,
) -> VersionScan:
    """The files of exactly ``ref``'s version that ``filters`` (delta-rs DNF tuples) can select.

    Files are pruned by delta-rs (partition values and file statistics); each keeps the row indices
    its deletion vector removes, so a reader of the Parquet files returns the version's rows and
    not the deleted ones. Raises :class:`SchemaMismatchError` for reader features a Parquet read
    cannot honour (column mapping), naming the table, the version and the feature.

    A version whose commit files log retention removed is read from the oldest readable version
    when no commit in between touched a partition the reader selects (same rows; ``rows_of``: the
    DNF that decides which partitions, default ``filters``); a version whose data files of selected
    partitions a VACUUM removed is refused, naming them (:mod:`.history_recovery`).
    """
    import pyarrow as pa

    from airflow_provider_dltrain.lake.history_recovery import open_for_rows

    table = open_for_rows(ref, storage_options, filters if rows_of is None else rows_of)
    _require_scannable(table, ref)
    root = normalize_uri(ref.uri)
    partition_columns = tuple(table.metadata().partition_columns)
    selected = set(table.file_uris(file_pruning_predicate=filters or None))
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    counts = (
        actions.column("num_records").to_pylist()
        if "num_records" in actions.column_names
        else [None] * len(paths)
    )
    values = {c: actions.column(f"partition.{c}").to_pylist() for c in partition_columns}
    deleted = _deleted_rows(table) if "deletionVectors" in _reader_features(table) else {}
    files = []
    for i, path in enumerate(paths):
        uri = f"{root}/{unquote(path)}"
        if uri in selected:
            partition = tuple((c, _text(values[c][i])) for c in partition_columns)
            files.append(ScanFile(uri, partition, deleted.get(uri, ()), counts[i]))
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


# --- reading the files back (pyarrow only) ---------------------------------------------------------


def drop_rows(data: Any, deleted: Sequence[int], offset: int = 0) -> Any:
    """``data`` (rows ``offset..`` of a file, a Table or RecordBatch) without the ``deleted`` (sorted) rows."""
    import numpy as np
    import pyarrow as pa

    lo, hi = bisect.bisect_left(deleted, offset), bisect.bisect_left(deleted, offset + data.num_rows)
    if lo == hi:
        return data
    keep = np.ones(data.num_rows, dtype=bool)
    keep[np.asarray(deleted[lo:hi], dtype=np.int64) - offset] = False
    return data.filter(pa.array(keep))


def conform(data: Any, schema: pa.Schema, partition: Mapping[str, str | None]) -> Any:
    """``data`` with exactly ``schema``'s columns: partition values filled in, absent columns null."""
    import pyarrow as pa

    n, columns = data.num_rows, []
    for field in schema:
        if field.name in partition:
            value = pa.array([partition[field.name]], pa.string()).cast(field.type)[0]
            columns.append(pa.repeat(value, n))
        elif field.name in data.schema.names:
            columns.append(data.column(field.name).cast(field.type))
        else:  # a column added after this file was written
            columns.append(pa.nulls(n, field.type))
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(
        [pa.chunked_array([c]) if isinstance(c, pa.Array) else c for c in columns], schema=schema
    )


def iter_file_batches(
    uri: str,
    schema: pa.Schema,
    storage_options: StorageOptions | None,
    partition: Mapping[str, str | None],
    deleted: Sequence[int],
    expr: Any = None,
) -> Iterator[pa.RecordBatch]:
    """One file's rows in ``schema`` as non-empty batches, deleted rows dropped, ``expr`` applied."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = filesystem(uri, storage_options)
    deleted = sorted(deleted)
    offset = 0
    with fs.open_input_file(path) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=_ROWS_PER_BATCH):
            out = conform(drop_rows(batch, deleted, offset), schema, partition)
            offset += batch.num_rows
            if expr is not None:
                yield from (b for b in pa.Table.from_batches([out]).filter(expr).to_batches() if b.num_rows)
            elif out.num_rows:
                yield out


def _fragment(
    fs: pafs.FileSystem, path: str, schema: pa.Schema, partition: Partition, row_group: int | None
) -> Any:
    import pyarrow.dataset as pads

    return pads.ParquetFileFormat().make_fragment(
        path,
        filesystem=fs,
        partition_expression=partition_expression(partition, schema),
        row_groups=None if row_group is None else [row_group],
    )


def row_groups(
    fs: pafs.FileSystem, path: str, schema: pa.Schema, partition: Partition, dnf: DNF = ()
) -> list[int]:
    """Ids of the file's row groups whose statistics do not rule out the filter."""
    pieces = _fragment(fs, path, schema, partition, None).split_by_row_group(
        filter=filter_expression(dnf, schema), schema=schema
    )
    return [piece.row_groups[0].id for piece in pieces]


def read_file(
    fs: pafs.FileSystem,
    path: str,
    schema: pa.Schema,
    columns: Sequence[str],
    *,
    partition: Partition = (),
    deleted_rows: Sequence[int] = (),
    dnf: DNF = (),
    row_group: int | None = None,
    memory_pool: Any = None,
) -> pa.Table:
    """The rows of one data file (of one of its row groups when given) matching ``dnf``, ``columns`` only.

    Rows in ``deleted_rows`` (indices in the file) are dropped before the filter is applied.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    expr = filter_expression(dnf, schema)
    if not deleted_rows:
        fragment = _fragment(fs, path, schema, partition, row_group)
        return fragment.to_table(schema=schema, columns=list(columns), filter=expr, memory_pool=memory_pool)
    # deleted rows are positions in the file: read unfiltered, drop them, then filter
    needed = list(dict.fromkeys([*columns, *filter_columns(dnf)]))
    values = dict(partition)
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        physical = [n for n in needed if n not in values and n in parquet.schema_arrow.names]
        if row_group is None:
            offset, data = 0, parquet.read(columns=physical)
        else:
            offset = sum(parquet.metadata.row_group(i).num_rows for i in range(row_group))
            data = parquet.read_row_group(row_group, columns=physical)
    data = conform(
        drop_rows(data, sorted(deleted_rows), offset), pa.schema([schema.field(n) for n in needed]), values
    )
    if expr is not None:
        data = data.filter(expr)
    return data.select(list(columns))


def read_files(
    fs: pafs.FileSystem,
    files: Sequence[tuple[str, Partition, Sequence[int]]],
    schema: pa.Schema,
    columns: Sequence[str],
    dnf: DNF = (),
) -> pa.Table:
    """The rows of many ``(path, partition, deleted rows)`` files matching ``dnf``, in no set order."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    columns = list(columns)
    whole = [(path, partition) for path, partition, deleted in files if not deleted]
    parts = []
    if whole:
        # one scan with pyarrow's threads (files and columns in parallel): measured faster than
        # a thread per file
        dataset = pads.FileSystemDataset.from_paths(
            [path for path, _ in whole],
            schema=schema,
            format=pads.ParquetFileFormat(),
            filesystem=fs,
            partitions=[partition_expression(partition, schema) for _, partition in whole],
        )
        parts.append(
            dataset.to_table(columns=columns, filter=filter_expression(dnf, schema), use_threads=True)
        )
    for path, partition, deleted in files:
        if deleted:
            parts.append(
                read_file(fs, path, schema, columns, partition=partition, deleted_rows=deleted, dnf=dnf)
            )
    if not parts:
        return schema.empty_table().select(columns)
    return pa.concat_tables([parts[0], *(p.cast(parts[0].schema) for p in parts[1:])])


def read_version(
    scan: VersionScan, columns: Sequence[str], dnf: DNF = (), storage_options: StorageOptions | None = None
) -> pa.Table:
    """The rows of a :class:`VersionScan` matching ``dnf`` (deleted rows dropped), ``columns`` only."""
    fs, _ = filesystem(scan.ref.uri, storage_options)
    files = [(filesystem(f.uri, storage_options)[1], f.partition, f.deleted_rows) for f in scan.files]
    return read_files(fs, files, scan.schema, columns, dnf)
