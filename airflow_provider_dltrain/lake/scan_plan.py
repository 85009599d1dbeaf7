"""Which bytes a training run reads: the files of one pinned Delta version, optionally filtered.

The file list is resolved once, in the launching process, by the lake's reader
(:func:`airflow_provider_dltrain.lake.reader.scan_version`: deletion vectors resolved to the row
indices they drop, column mapping refused); workers receive a plain, picklable :class:`ScanPlan` and
read the Parquet files with pyarrow only, through the same reader. delta-rs panics in forked
processes, and this keeps it out of every worker (DDP ranks and DataLoader workers alike).

Filters are the JSON-able DNF lists of :mod:`airflow_provider_dltrain.lake.filters`. Predicates on
partition columns prune files; the others prune Parquet row groups by statistics and then rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.filters import (
    DNF,
    DataFilter,
    filter_expression,
    normalize_filter,
    partition_expression,
)
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, join, normalize_uri

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads


@dataclass(frozen=True)
class DataFile:
    """One active Parquet file of the pinned version: its path relative to the table root."""

    path: str
    partition: tuple[tuple[str, str | None], ...] = ()
    num_records: int | None = None
    deleted_rows: tuple[int, ...] = ()  # row indices (sorted) the file's deletion vector removes


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
        """Rows in the selected files before any row-level filter, when the Delta log records it
        (rows removed by deletion vectors not counted)."""
        counts = [f.num_records for f in self.files]
        if any(c is None for c in counts):
            return None
        return sum(c or 0 for c in counts) - sum(len(f.deleted_rows) for f in self.files)

    def dataset(self) -> pads.FileSystemDataset:
        """A pyarrow dataset over the selected files; partition columns come from the Delta log."""
        import pyarrow.dataset as pads

        fs, root = filesystem(self.ref.uri, self.storage_options)
        exprs = [partition_expression(f.partition, self.schema) for f in self.files]
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

    def read(self, columns: Sequence[str]) -> pa.Table:
        """The selected rows (deleted rows dropped, filter applied) of every file, ``columns`` only."""
        from airflow_provider_dltrain.lake.reader import read_files

        fs, root = filesystem(self.ref.uri, self.storage_options)
        files = [(join(root, f.path), f.partition, f.deleted_rows) for f in self.files]
        return read_files(fs, files, self.schema, columns, self.data_filter)

    def row_groups(self, index: int) -> list[int]:
        """Row groups of ``files[index]`` whose statistics do not rule out the filter."""
        from airflow_provider_dltrain.lake.reader import row_groups

        fs, root = filesystem(self.ref.uri, self.storage_options)
        data_file = self.files[index]
        return row_groups(fs, join(root, data_file.path), self.schema, data_file.partition, self.data_filter)

    def read_row_group(
        self, index: int, row_group: int, columns: Sequence[str], memory_pool: Any = None
    ) -> pa.Table:
        """The selected rows of one row group of ``files[index]``, ``columns`` only."""
        from airflow_provider_dltrain.lake.reader import read_file

        fs, root = filesystem(self.ref.uri, self.storage_options)
        data_file = self.files[index]
        return read_file(
            fs,
            join(root, data_file.path),
            self.schema,
            columns,
            partition=data_file.partition,
            deleted_rows=data_file.deleted_rows,
            dnf=self.data_filter,
            row_group=row_group,
            memory_pool=memory_pool,
        )


def resolve(
    ref: DeltaRef | dict[str, Any] | str,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
) -> ScanPlan:
    """List the files of exactly ``ref``'s version that ``data_filter`` can select (delta-rs, here only)."""
    from airflow_provider_dltrain.lake.reader import scan_version
    from airflow_provider_dltrain.lake.table import ref_at

    ref = DeltaRef.coerce(ref)
    ref = DeltaRef(normalize_uri(ref.uri), ref.version, ref.timestamp)
    # every file: the filter is cast and applied below (it also says which partitions count when
    # the version must be read from a later one, its log being gone)
    scan = scan_version(ref, storage_options, rows_of=normalize_filter(data_filter))
    if ref.timestamp is None:  # a hand-written {"uri", "version"}: record when that version was committed
        ref = ref_at(ref.uri, ref.version, storage_options)
    root = f"{normalize_uri(scan.ref.uri)}/"
    files = tuple(
        sorted(
            (
                DataFile(f.uri.removeprefix(root), f.partition, f.num_records, f.deleted_rows)
                for f in scan.files
            ),
            key=lambda f: f.path,
        )
    )
    plan = _prune(
        ScanPlan(
            ref,
            scan.schema,
            scan.partition_columns,
            files,
            normalize_filter(data_filter),
            dict(storage_options or {}),
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
    """Digests of the partitions the lake API can name (from the history index)."""
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
    # the partitions come from the version's files: live by construction, no log read to check it
    return partition_digests(plan.ref.uri, plan.ref.version, specs.values(), plan.storage_options, live=True)


def _files_digest(plan: ScanPlan, files: Sequence[DataFile]) -> str | None:
    """The content digest of ``files``' rows, computed the way ``lake.digest`` computes a partition's
    (rows a deletion vector removed do not count)."""
    import pyarrow as pa

    from airflow_provider_dltrain.lake.digest import state_of_files

    fs, root = filesystem(plan.ref.uri, plan.storage_options)
    schema = pa.schema([f for f in plan.schema if f.name not in plan.partition_columns])
    deleted = {join(root, f.path): f.deleted_rows for f in files if f.deleted_rows}
    return state_of_files(fs, [join(root, f.path) for f in files], schema, deleted).content_digest(schema)


def _prune(plan: ScanPlan) -> ScanPlan:
    """Drop files whose partition values cannot satisfy the filter."""
    expr = plan.expression()
    if expr is None or not plan.files:
        return plan
    _, root = filesystem(plan.ref.uri, plan.storage_options)
    by_path = {join(root, f.path): f for f in plan.files}
    kept = {fragment.path for fragment in plan.dataset().get_fragments(filter=expr)}
    return replace(plan, files=tuple(f for p, f in by_path.items() if p in kept))


def index_fingerprint(
    ref: DeltaRef | dict[str, Any] | str,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
) -> tuple[str, tuple[str, ...]] | None:
    """``(content fingerprint, partition columns)`` of ``ref`` + ``data_filter`` from the table's history
    index alone, equal to what :func:`resolve` computes; None when the index cannot say (then resolve).

    The skip decision of an unchanged training re-run needs only the fingerprint; resolving the plan
    lists every file of the version through delta-rs, a cost that grows with the table. The index
    knows, per partition, the digest its last write recorded, so when every selected partition was
    written by this provider (a recorded digest, or recorded as emptied), all partition columns are
    strings and the filter names partition columns only, the fingerprint is the same hash over the
    same ``(partition path, digest)`` lines.
    """
    from airflow_provider_dltrain.lake import history_index
    from airflow_provider_dltrain.lake.filters import dnf_selector

    ref = DeltaRef.coerce(ref)
    if ref.version is None:
        return None
    dnf = normalize_filter(data_filter)
    index = history_index.load(ref.uri, storage_options, newest=ref.version)
    types = index.partition_types if index is not None else None
    if index is None or not types or any(t != "string" for t in types.values()):
        return None
    columns = tuple(types)
    if any(c not in columns for conj in dnf for c, _, _ in conj):
        return None  # a row filter: the fingerprint also hashes the filter, and resolve prunes by statistics
    selects = dnf_selector(dnf, types)
    found = index.candidates(dnf, columns)
    if found is None:
        return None  # a partition without a value of every column: its files decide
    kept = _prefix_fingerprint(index, dnf, columns, ref.version)
    if kept is not _UNKNOWN:
        return None if kept is None else (kept, columns)
    keys, exact = found
    lines = []
    for key in keys:
        values = dict(key)
        if dnf and not exact and not selects(values):
            continue
        write = index.last_write(key, ref.version)
        if write is None:
            continue
        if not write.content_known:
            return None  # another tool's write: its files decide, read them
        if write.digest is None:
            continue  # emptied: no file, not selected
        lines.append(("/".join(f"{c}={values[c]}" for c in sorted(values)), write.digest))
    digest = hashlib.sha256(_CONTENT_HEAD)
    for path, value in sorted(lines):
        digest.update(f"{path}\t{value}\n".encode())
    return digest.hexdigest(), columns


_CONTENT_HEAD = b"dltrain-content-v1\n"
_UNKNOWN = object()


def _through(dnf: Any, columns: tuple[str, ...]) -> str | None:
    """``D`` when the filter is ``column <= D`` on a table partitioned by that one string column (a
    nightly training's cut-off), else None."""
    if len(columns) != 1 or len(dnf) != 1 or len(dnf[0]) != 1:
        return None
    column, op, value = dnf[0][0]
    return value if column == columns[0] and op == "<=" and isinstance(value, str) else None


def _prefix_fingerprint(index: Any, dnf: Any, columns: tuple[str, ...], version: int) -> Any:
    """``index_fingerprint`` of ``column <= text`` (the filter ``dnf``) at ``version`` inside a
    :func:`~airflow_provider_dltrain.lake.state.one_state` block (a plan asks it for every date of a
    range): the hash over the partitions in text order is kept after each partition, with the version
    since which none of them hashes differently, so each date's answer is one bisection, not a pass over
    every earlier partition. It holds at or after that version (a compaction since keeps the digest);
    before it, or outside a block, ``_UNKNOWN``: the loop answers. None: a partition's content is
    unknown (another tool's write), as the loop says."""
    import bisect

    from airflow_provider_dltrain.lake import state

    kept, text = state.kept(), _through(dnf, columns)
    if kept is None or text is None:
        return _UNKNOWN
    column = columns[0]
    question = ("prefix fingerprint", index.uri, index.indexed, column)
    if question not in kept:
        by_text = {dict(key).get(column): key for key in index.writes}
        texts = sorted(t for t in by_text if isinstance(t, str))
        digest, settled, known, prefix = hashlib.sha256(_CONTENT_HEAD), -1, True, []
        for each in texts:
            writes = index.writes.get(by_text[each]) or []
            if writes:
                last = writes[-1]
                settled = max(settled, _settled(writes))
                known = known and last.content_known
                if last.digest is not None and known:
                    digest.update(f"{column}={each}\t{last.digest}\n".encode())
            prefix.append((digest.hexdigest() if known else None, settled))
        kept[question] = (texts, prefix)
    texts, prefix = kept[question]
    at = bisect.bisect_right(texts, text)
    if not at:
        return hashlib.sha256(_CONTENT_HEAD).hexdigest()
    answer, settled = prefix[at - 1]
    return answer if settled <= version else _UNKNOWN


def _settled(writes: Sequence[Any]) -> int:
    """The oldest version from which a partition's newest write gives its line: the first of the
    trailing writes that say what the newest says (content known or not, the same digest)."""
    last = writes[-1]
    settled = last.version
    for write in reversed(writes):
        if (write.content_known, write.digest) != (last.content_known, last.digest):
            break
        settled = write.version
    return settled


def fingerprint(
    ref: DeltaRef | dict[str, Any] | str,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
) -> str:
    """sha256 naming the rows a run on ``ref`` + ``data_filter`` reads (``ScanPlan.fingerprint``)."""
    return resolve(ref, data_filter, storage_options).fingerprint
