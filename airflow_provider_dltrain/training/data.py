"""Which bytes a training run reads: the files of one pinned Delta version, optionally filtered.

The file list is resolved once, in the launching process, with delta-rs; workers receive a plain,
picklable :class:`ScanPlan` and read the Parquet files with pyarrow only. delta-rs panics in forked
processes, and this keeps it out of every worker (DDP ranks and DataLoader workers alike).

Filters are JSON-able DNF lists, as Airflow templates render them::

    [["ds", "<=", "2026-11-28"]]                         # one conjunction
    [[["ds", ">=", "2026-11-01"], ["label", "<", "5"]]]  # OR of conjunctions

Values are cast to the column's type (a rendered ``"5"`` compares as an integer on an int column).
Predicates on partition columns prune files; the others prune Parquet row groups by statistics
and then rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, join, normalize_uri

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

Predicate = tuple[str, str, Any]
DNF = tuple[tuple[Predicate, ...], ...]
DataFilter = Sequence[Any]

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}


@dataclass(frozen=True)
class DataFile:
    """One active Parquet file of the pinned version: its path relative to the table root."""

    path: str
    partition: tuple[tuple[str, str | None], ...] = ()
    num_records: int | None = None


@dataclass(frozen=True)
class ScanPlan:
    """Everything a worker needs to read exactly the selected rows, with no delta-rs and no network.

    ``files`` are sorted by path; the loader orders rows by content anyway, so neither the file
    layout nor the file order changes what a run sees. ``content_fingerprint`` names the selected
    rows (computed once by :func:`resolve`, in the launching process).
    """

    ref: DeltaRef
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    files: tuple[DataFile, ...]
    data_filter: DNF = ()
    storage_options: StorageOptions = field(default_factory=dict, repr=False)
    content_fingerprint: str = ""

    @property
    def fingerprint(self) -> str:
        """The content fingerprint :func:`resolve` computed (see :func:`content_fingerprint`)."""
        if not self.content_fingerprint:
            raise InvalidSpecError(
                f"this ScanPlan of {self.ref.uri} has no content fingerprint; build plans with resolve()"
            )
        return self.content_fingerprint

    @property
    def row_filter_columns(self) -> tuple[str, ...]:
        """Filtered columns that are not partition columns (they select rows, not files)."""
        names = {p[0] for conj in self.data_filter for p in conj}
        return tuple(sorted(names - set(self.partition_columns)))

    @property
    def num_records(self) -> int | None:
        """Rows in the selected files before any row-level filter, when the Delta log records it."""
        counts = [f.num_records for f in self.files]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)

    def dataset(self) -> pads.FileSystemDataset:
        """A pyarrow dataset over the selected files; partition columns come from the Delta log."""
        import pyarrow.dataset as pads

        fs, root = filesystem(self.ref.uri, self.storage_options)
        exprs = [_partition_expression(f.partition, self.schema) for f in self.files]
        return pads.FileSystemDataset.from_paths(
            [join(root, f.path) for f in self.files],
            schema=self.schema,
            format=pads.ParquetFileFormat(),
            filesystem=fs,
            partitions=exprs,
        )

    def expression(self) -> pads.Expression | None:
        """The filter as a pyarrow expression (``None`` when there is no filter)."""
        return filter_expression(self.data_filter, self.schema)


def normalize_filter(data_filter: DataFilter | None) -> DNF:
    """Return ``data_filter`` as an OR of AND-ed ``(column, op, value)`` triples; raise naming a bad part."""
    if data_filter is None or (isinstance(data_filter, (list, tuple)) and len(data_filter) == 0):
        return ()
    if isinstance(data_filter, str):
        try:
            data_filter = json.loads(data_filter)
        except ValueError as err:
            raise InvalidSpecError(
                f'data_filter {data_filter!r:.200} is not JSON; pass e.g. [["ds", "<=", "2026-11-28"]]'
            ) from err
    if not isinstance(data_filter, (list, tuple)):
        raise InvalidSpecError(
            f"data_filter must be a list of [column, op, value] triples, got {data_filter!r:.200}"
        )
    first = data_filter[0]
    is_dnf = isinstance(first, (list, tuple)) and len(first) > 0 and isinstance(first[0], (list, tuple))
    conjunctions = data_filter if is_dnf else [data_filter]
    return tuple(tuple(_predicate(p) for p in conj) for conj in conjunctions)


def _predicate(item: Any) -> Predicate:
    if not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[0], str):
        raise InvalidSpecError(f"data_filter entry {item!r:.200} must be [column, op, value]")
    column, op, value = item
    op = str(op).strip().lower()
    if op not in _OPS:
        raise InvalidSpecError(f"data_filter on {column!r}: operator {op!r} is not one of {sorted(_OPS)}")
    if op in {"in", "not in"}:
        if not isinstance(value, (list, tuple)):
            raise InvalidSpecError(
                f"data_filter on {column!r}: {op!r} needs a list of values, got {value!r:.100}"
            )
        value = tuple(value)
    return (column, op, value)


def _cast(value: Any, dtype: pa.DataType, column: str) -> Any:
    import pyarrow as pa

    try:
        return pa.scalar(value).cast(dtype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise InvalidSpecError(
            f"data_filter on {column!r}: value {value!r:.100} cannot be compared with a {dtype} column"
        ) from err


def filter_expression(dnf: DNF, schema: pa.Schema) -> pads.Expression | None:
    """Translate a normalised filter into a pyarrow expression, checking every column exists."""
    import pyarrow.dataset as pads

    if not dnf:
        return None
    result = None
    for conj in dnf:
        term = None
        for column, op, value in conj:
            if schema.get_field_index(column) < 0:
                raise InvalidSpecError(
                    f"data_filter names column {column!r}, which the table lacks; columns: {schema.names}"
                )
            dtype = schema.field(column).type
            ref = pads.field(column)
            if op in {"in", "not in"}:
                import pyarrow as pa

                values = pa.array([_cast(v, dtype, column).as_py() for v in value], type=dtype)
                pred = ref.isin(values) if op == "in" else ~ref.isin(values)
            else:
                scalar = _cast(value, dtype, column)
                pred = {
                    "=": ref == scalar,
                    "==": ref == scalar,
                    "!=": ref != scalar,
                    "<": ref < scalar,
                    "<=": ref <= scalar,
                    ">": ref > scalar,
                    ">=": ref >= scalar,
                }[op]
            term = pred if term is None else term & pred
        result = term if result is None else result | term
    return result


def _partition_expression(
    partition: tuple[tuple[str, str | None], ...], schema: pa.Schema
) -> pads.Expression:
    import pyarrow.dataset as pads

    expr = pads.scalar(True)
    for column, value in partition:
        ref = pads.field(column)
        if value is None:
            expr = expr & ref.is_null()
        else:
            expr = expr & (ref == _cast(value, schema.field(column).type, column))
    return expr


def resolve(
    ref: DeltaRef | dict[str, Any] | str,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
) -> ScanPlan:
    """List the files of exactly ``ref``'s version that ``data_filter`` can select (delta-rs, here only)."""
    import pyarrow as pa

    from airflow_provider_dltrain.lake.table import open_table, ref_at

    ref = DeltaRef.coerce(ref)
    ref = DeltaRef(normalize_uri(ref.uri), ref.version, ref.timestamp)
    table = open_table(ref.uri, ref.version, storage_options)
    if ref.timestamp is None:  # a hand-written {"uri", "version"}: record when that version was committed
        ref = ref_at(ref.uri, ref.version, storage_options)
    _check_readable(table, ref)
    schema = pa.schema(table.schema().to_arrow())
    partition_columns = tuple(table.metadata().partition_columns)
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    counts = (
        actions.column("num_records").to_pylist()
        if "num_records" in actions.column_names
        else [None] * len(paths)
    )
    values = {c: actions.column(f"partition.{c}").to_pylist() for c in partition_columns}
    files = tuple(
        sorted(
            (
                DataFile(path, tuple((c, _text(values[c][i])) for c in partition_columns), counts[i])
                for i, path in enumerate(paths)
            ),
            key=lambda f: f.path,
        )
    )
    plan = _prune(
        ScanPlan(
            ref, schema, partition_columns, files, normalize_filter(data_filter), dict(storage_options or {})
        )
    )
    return replace(plan, content_fingerprint=content_fingerprint(plan))


def content_fingerprint(plan: ScanPlan) -> str:
    """sha256 over the sorted ``(partition path, content digest)`` of the selected partitions, plus
    the filter JSON when it selects rows inside them (a predicate on a non-partition column).

    Only the rows count, never file names: the same rows rewritten into other files, or the same
    partitions selected from a later version that added others, give the same fingerprint. A
    partition's digest is the one its commit recorded (``lake.digest``), else it is computed from
    the selected files. An unpartitioned table is one partition, path ``""``, whose digest is
    computed from all its files (read once here). Needs delta-rs: launching process only.
    """
    groups = _partition_groups(plan)
    digests = _recorded_digests(plan, groups)
    digest = hashlib.sha256(b"dltrain-content-v1\n")
    for path in sorted(groups):
        # a partition written by another tool, or with a value the lake API refuses: read it
        value = digests.get(path) or _files_digest(plan, groups[path])
        digest.update(f"{path}\t{value or '-'}\n".encode())
    if plan.row_filter_columns:
        digest.update(json.dumps(plan.data_filter, default=str).encode())
    return digest.hexdigest()


_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _partition_groups(plan: ScanPlan) -> dict[str, tuple[DataFile, ...]]:
    """Selected files by partition path (columns in name order, as ``lake.digest`` names them)."""
    groups: dict[str, list[DataFile]] = {}
    for data_file in plan.files:  # files are pruned per partition: each partition is selected whole
        path = "/".join(f"{c}={_NULL_PARTITION if v is None else v}" for c, v in sorted(data_file.partition))
        groups.setdefault(path, []).append(data_file)
    return {path: tuple(files) for path, files in groups.items()}


def _recorded_digests(plan: ScanPlan, groups: dict[str, tuple[DataFile, ...]]) -> dict[str, str | None]:
    """Digests of the partitions the lake API can name (one backward walk of the Delta log)."""
    from airflow_provider_dltrain.exceptions import InvalidPartitionError
    from airflow_provider_dltrain.lake import partition as part
    from airflow_provider_dltrain.lake.digest import partition_digests

    specs = {}
    for path, files in groups.items():
        try:
            spec = part.validate_partition(dict(files[0].partition))
        except InvalidPartitionError:
            continue  # unpartitioned, a null value, or characters the lake API refuses
        if part.path_of(spec, sorted(spec)) == path:
            specs[path] = spec
    if not specs:
        return {}
    return partition_digests(plan.ref.uri, plan.ref.version, specs.values(), plan.storage_options)


def _files_digest(plan: ScanPlan, files: Sequence[DataFile]) -> str | None:
    """The content digest of ``files``' rows, computed the way ``lake.digest`` computes a partition's."""
    import pyarrow as pa

    from airflow_provider_dltrain.lake.digest import state_of_files

    fs, root = filesystem(plan.ref.uri, plan.storage_options)
    schema = pa.schema([f for f in plan.schema if f.name not in plan.partition_columns])
    return state_of_files(fs, [join(root, f.path) for f in files], schema).content_digest(schema)


# Reader features under which a Parquet file's rows/columns are not the table's rows/columns.
_UNSUPPORTED_READER_FEATURES = ("deletionVectors", "columnMapping")


def _check_readable(table: Any, ref: DeltaRef) -> None:
    features = set(table.protocol().reader_features or ())
    blocked = sorted(features.intersection(_UNSUPPORTED_READER_FEATURES))
    if blocked:
        raise SchemaMismatchError(
            f"{ref.uri} version {ref.version} uses Delta reader features {blocked}: reading its Parquet "
            "files directly would return deleted rows or physical column names. Rewrite the table "
            "without them (e.g. purge deletion vectors, disable column mapping) before training on it."
        )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _prune(plan: ScanPlan) -> ScanPlan:
    """Drop files whose partition values cannot satisfy the filter."""
    expr = plan.expression()
    if expr is None or not plan.files:
        return plan
    _, root = filesystem(plan.ref.uri, plan.storage_options)
    by_path = {join(root, f.path): f for f in plan.files}
    kept = {fragment.path for fragment in plan.dataset().get_fragments(filter=expr)}
    return replace(plan, files=tuple(f for p, f in by_path.items() if p in kept))


def fingerprint(
    ref: DeltaRef | dict[str, Any] | str,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
) -> str:
    """sha256 naming the rows a run on ``ref`` + ``data_filter`` reads (``ScanPlan.fingerprint``)."""
    return resolve(ref, data_filter, storage_options).fingerprint
