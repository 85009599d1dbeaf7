"""Idempotent partition overwrites: one partition replaced in one atomic Delta commit.

Content-idempotent too: every commit records the content digest of the partition it wrote
(:mod:`~airflow_provider_dltrain.lake.digest`), and a write whose rows equal the partition's current
rows commits nothing. Re-running a date, however often, leaves the table at the same version, so
nothing downstream sees "changed data" that did not change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.lake import commit as txn
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.digest import (
    META_DIGEST,
    META_PARTITION,
    DigestState,
    canonical_partition,
)
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.row_hash import normalize_type
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, join, normalize_uri
from airflow_provider_dltrain.lake.written_files import (
    WrittenFile,
    adds_any,
    delete_files,
)

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)
SchemaMode = Literal["strict", "merge"]
METADATA_KEYS = ("dag_id", "run_id", "task_id", "try_number", "logical_date")


def commit_metadata(
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    try_number: int | None = None,
    logical_date: str | None = None,
    **extra: Any,
) -> dict[str, str]:
    """Who committed: stored in the Delta commit's ``commitInfo`` under ``airflow.*`` keys."""
    values = zip(METADATA_KEYS, (dag_id, run_id, task_id, try_number, logical_date), strict=True)
    out = {f"airflow.{k}": str(v) for k, v in values if v is not None}
    out.update({f"dltrain.{k}": str(v) for k, v in extra.items() if v is not None})
    return out


# -- schema -----------------------------------------------------------------------------------
def check_schema(
    table_schema: pa.Schema | None,
    data_schema: pa.Schema,
    *,
    schema_mode: SchemaMode = "strict",
    where: str = "the table",
) -> list[str]:
    """Raise :class:`SchemaMismatchError` naming conflicting columns; return the new columns.

    Types must match (string/large_string and list/large_list are the same to Delta). Columns the
    data lacks are refused; columns the table lacks are refused unless ``schema_mode="merge"``.
    """
    if table_schema is None:
        return []
    if schema_mode not in ("strict", "merge"):
        raise InvalidSpecError(f"schema_mode must be 'strict' or 'merge', got {schema_mode!r}")
    table_types = {f.name: normalize_type(f.type) for f in table_schema}
    data_types = {f.name: normalize_type(f.type) for f in data_schema}
    conflicts = [
        f"{name}: table has {table_types[name]}, data has {data_types[name]}"
        for name in data_types
        if name in table_types and table_types[name] != data_types[name]
    ]
    missing = sorted(set(table_types) - set(data_types))
    added = [name for name in data_types if name not in table_types]
    problems = []
    if conflicts:
        problems.append("type conflicts: " + "; ".join(conflicts))
    if missing:
        problems.append(f"columns missing from the data: {missing}")
    if added and schema_mode != "merge":
        problems.append(f"columns not in the table: {added} (pass schema_mode='merge' to add them)")
    if problems:
        raise SchemaMismatchError(f"schema of the data conflicts with {where}: " + " | ".join(problems))
    return added


def table_arrow_schema(uri: str, storage_options: StorageOptions | None = None) -> pa.Schema | None:
    from airflow_provider_dltrain.lake.table import open_table

    if DeltaLog(uri, storage_options).latest_version() is None:
        return None
    import pyarrow as pa

    return pa.schema(open_table(uri, None, storage_options).schema().to_arrow())


# -- writes -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionWrite:
    """What one partition overwrite did."""

    ref: DeltaRef  # the version holding the content: this write's commit, or the earlier one if unchanged
    committed: bool  # False: the partition already held exactly these rows, nothing was committed
    digest: str | None  # content digest of the partition now; None when it has no rows


def _partition_columns(spec: dict[str, str], partition_by: Sequence[str] | None) -> list[str]:
    columns = list(partition_by or sorted(spec))
    if set(columns) != set(spec):
        raise InvalidSpecError(f"partition {spec} must name exactly the partition columns {columns}")
    return columns


def _with_partition_columns(data: pa.Table, partition: Mapping[str, str]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.compute as pc

    for column, value in partition.items():
        if column in data.column_names:
            col = data.column(column).cast(pa.string())
            bad = pc.sum(pc.invert(pc.fill_null(pc.equal(col, value), False))).as_py() or 0
            if bad:
                raise InvalidSpecError(
                    f"{bad} row(s) have {column} != {value!r}; a partition write must only contain its partition"
                )
            data = data.set_column(data.schema.get_field_index(column), column, col)
        else:
            data = data.append_column(column, pa.array([value] * data.num_rows, pa.string()))
    return data


def _with_digest(
    metadata: Mapping[str, str] | None, spec: dict[str, str], digest: str | None
) -> dict[str, str]:
    """Commit metadata plus the partition and its new content digest, for the next write to compare."""
    out = dict(metadata or {})
    out[META_PARTITION] = canonical_partition(spec)
    if digest is not None:
        out[META_DIGEST] = digest
    return out


def _unchanged(
    uri: str,
    spec: dict[str, str],
    digest: str | None,
    storage_options: StorageOptions | None,
    recorded: Mapping[str, str] | None = None,
) -> DeltaRef | None:
    """The version that last wrote ``spec`` when the partition's content already has ``digest``.

    Compared at the newest version. A writer of the same partition committing right after this
    check makes the commit that follows conflict (:mod:`~airflow_provider_dltrain.lake.commit`), and
    the retry checks again. An empty write into an empty partition is unchanged too. With
    ``recorded``, the partition's last commit must also have recorded exactly these metadata values
    (e.g. the main-table version a quarantine partition belongs to), else the write commits anyway.
    """
    from airflow_provider_dltrain.lake.digest import digests_and_commits

    log = DeltaLog(uri, storage_options)
    newest = log.latest_version()
    if newest is None:
        return None
    ((current, version),) = digests_and_commits(uri, newest, [spec], storage_options).values()
    if current != digest:
        return None
    if recorded:
        from airflow_provider_dltrain.lake.pairing import last_recorded_commit

        last = last_recorded_commit(uri, spec, storage_options, at_version=newest)
        if last is None or any(last[1].get(k) != v for k, v in recorded.items()):
            return None
    ref = log.ref(version) if version is not None else _own_commit(uri, spec, storage_options)
    logger.info(
        "%s of %s unchanged: no commit; its content is that of version %d (newest %d)",
        part.path_of(spec, sorted(spec)),
        uri,
        ref.version,
        newest,
    )
    return ref


def _digest_of(data: pa.Table, columns: Sequence[str]) -> str | None:
    rows = data.drop_columns([c for c in columns if c in data.column_names])
    state = DigestState()
    state.update(rows)
    return state.content_digest(rows.schema)


def overwrite_partition(
    uri: str,
    data: pa.Table,
    partition: Mapping[str, object],
    *,
    partition_by: Sequence[str] | None = None,
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
    configuration: Mapping[str, str] | None = None,
) -> DeltaRef:
    """Replace exactly ``partition`` of the table with ``data`` in one commit; return the version holding it.

    Creates the table (partitioned by ``partition_by``, default the partition's columns) when it
    does not exist, with ``configuration`` as its properties (default: the backfill horizon's
    retention, :func:`~airflow_provider_dltrain.lake.retention.table_properties`). When the partition already holds exactly these rows (in any order) and the
    schema would not change, nothing is committed and the version that last wrote the partition is
    returned: re-running a date leaves the same content at the same version.
    """
    from deltalake import DeltaTable, write_deltalake

    uri = normalize_uri(uri)
    spec = part.validate_partition(partition)
    columns = _partition_columns(spec, partition_by)
    data = _with_partition_columns(data, spec)
    digest = _digest_of(data, columns)

    def attempt(_: int) -> DeltaRef:
        existing = table_arrow_schema(uri, storage_options)
        added = check_schema(existing, data.schema, schema_mode=schema_mode, where=uri)
        same = _unchanged(uri, spec, digest, storage_options) if existing is not None and not added else None
        if same is not None:
            return same
        token = txn.new_token()
        # the snapshot this attempt overwrites from; a writer committing after it makes the commit conflict
        table = DeltaTable(uri, storage_options=storage_options or None) if existing is not None else None
        write_deltalake(
            table if table is not None else uri,
            data,
            mode="overwrite",
            predicate=part.predicate(spec),
            partition_by=columns,
            schema_mode="merge" if schema_mode == "merge" else None,
            storage_options=storage_options or None,
            configuration=None if table is not None else _properties(configuration),
            commit_properties=txn.commit_properties(_with_digest(metadata, spec, digest), spec, token),
        )
        return txn.find_commit(uri, spec, token, storage_options)

    ref = txn.with_retries(uri, spec, attempt)
    history_index.update(uri, storage_options)
    return ref


def _properties(configuration: Mapping[str, str] | None) -> dict[str, str]:
    """A new table's properties: the horizon's retention, then what the caller gives."""
    from airflow_provider_dltrain.lake.retention import table_properties

    return {**table_properties(), **dict(configuration or {})}


def _own_commit(uri: str, spec: dict[str, str], storage_options: StorageOptions | None) -> DeltaRef:
    """The newest commit touching ``spec``: for an unchanged write, or a writer that records no txn token.

    Not simply the newest version: writers of other partitions may have committed since.
    """
    from airflow_provider_dltrain.exceptions import TableNotFoundError
    from airflow_provider_dltrain.lake.history import partition_commit

    try:
        return partition_commit(uri, spec, storage_options=storage_options)
    except TableNotFoundError:  # an empty write into a partition that never had files
        log = DeltaLog(uri, storage_options)
        return log.ref(log.latest_version() or 0)


def _files_state(
    uri: str, files: Sequence[WrittenFile], schema: pa.Schema, storage_options: StorageOptions | None
) -> DigestState:
    from airflow_provider_dltrain.lake.digest import state_of_files

    fs, root = filesystem(uri, storage_options)
    return state_of_files(fs, [join(root, f.path) for f in files], schema)


def _create_table(
    uri: str,
    adds: list[Any],
    schema: pa.Schema,
    columns: list[str],
    properties: Any,
    configuration: Mapping[str, str] | None,
    storage_options: StorageOptions | None,
) -> bool:
    """Create the table with ``adds`` as its first commit; False when another writer created it first."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    try:
        create_table_with_add_actions(
            uri,
            Schema.from_arrow(schema),
            adds,
            mode="error",
            partition_by=columns,
            configuration=_properties(configuration),
            storage_options=storage_options or None,
            commit_properties=properties,
        )
    except Exception:
        if DeltaLog(uri, storage_options).latest_version() is None:
            raise
        return False  # retried as an overwrite of the table that now exists
    return True


def _commit_overwrite(
    uri: str,
    adds: list[Any],
    schema: pa.Schema,
    spec: dict[str, str],
    columns: list[str],
    added: list[str],
    properties: Any,
    storage_options: StorageOptions | None,
) -> None:
    from deltalake import DeltaTable, Schema

    table = DeltaTable(uri, storage_options=storage_options or None)
    if added:
        table.alter.add_columns([f for f in Schema.from_arrow(schema).fields if f.name in added])
        table.update_incremental()
    table.create_write_transaction(
        adds,
        mode="overwrite",
        # the table's own schema: column order or nullability in the data must never rewrite it
        schema=table.schema(),
        partition_by=columns,
        partition_filters=part.filters(spec),
        commit_properties=properties,
    )


def commit_files(
    uri: str,
    files: Sequence[WrittenFile],
    schema: pa.Schema,
    partition: Mapping[str, object],
    *,
    partition_by: Sequence[str],
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
    configuration: Mapping[str, str] | None = None,
    digest: DigestState | None = None,
    recorded: Mapping[str, str] | None = None,
) -> PartitionWrite:
    """Commit already-written files as the new content of ``partition`` (one atomic overwrite).

    ``schema`` is the table schema including the partition columns; ``digest`` the state of the
    files' rows (partition columns left out) kept while writing them; without it the files are read
    back. Each attempt reads the newest snapshot, so whatever another run committed meanwhile is
    replaced, never duplicated; a concurrent writer of the same partition makes the attempt conflict
    and it is retried (:mod:`~airflow_provider_dltrain.lake.commit`). When the partition already
    holds exactly these rows, the schema would not change and its last commit recorded ``recorded``
    (when given; these keys must be part of ``metadata``), nothing is committed and the files are
    deleted; so they are when the schema conflicts.

    :raises CommitConflictError: every attempt lost to a concurrent writer; the files are left for
        ``vacuum`` (another attempt of the task writes new ones).
    """
    import pyarrow as pa
    from deltalake.transaction import AddAction

    uri = normalize_uri(uri)
    spec = part.validate_partition(partition)
    columns = _partition_columns(spec, partition_by)
    data_schema = pa.schema([f for f in schema if f.name not in columns])
    state = digest if digest is not None else _files_state(uri, files, data_schema, storage_options)
    content = state.content_digest(data_schema)
    custom = _with_digest(metadata, spec, content)
    adds = [AddAction(f.path, f.size, dict(spec), f.modification_time, True, f.stats) for f in files]

    def attempt(number: int) -> PartitionWrite:
        token = txn.new_token()
        properties = txn.commit_properties(custom, spec, token)
        existing = table_arrow_schema(uri, storage_options)
        if existing is None:
            if _create_table(uri, adds, schema, columns, properties, configuration, storage_options):
                return PartitionWrite(txn.find_commit(uri, spec, token, storage_options), True, content)
            existing = table_arrow_schema(uri, storage_options)
        try:
            added = check_schema(existing, schema, schema_mode=schema_mode, where=uri)
        except SchemaMismatchError:
            delete_files(uri, files, storage_options)
            raise
        same = None if added else _unchanged(uri, spec, content, storage_options, recorded)
        if same is not None:
            # a retry after a commit that was not found (LostCommitError) may find that commit after
            # all: its files are then the partition's content and must stay
            mine = number > 1 and adds_any(uri, same.version, files, storage_options)
            if not mine:
                delete_files(uri, files, storage_options)
            return PartitionWrite(same, mine, content)
        _commit_overwrite(uri, adds, schema, spec, columns, added, properties, storage_options)
        return PartitionWrite(txn.find_commit(uri, spec, token, storage_options), True, content)

    written = txn.with_retries(uri, spec, attempt)
    if written.committed:
        history_index.update(uri, storage_options)
    return written
