"""Idempotent partition overwrites: one partition replaced in one atomic Delta commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dltrain.exceptions import CommitConflictError, InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.lock import partition_lock
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri

if TYPE_CHECKING:
    import pyarrow as pa

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
    values = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "try_number": try_number,
        "logical_date": logical_date,
    }
    out = {f"airflow.{k}": str(v) for k, v in values.items() if v is not None}
    out.update({f"dltrain.{k}": str(v) for k, v in extra.items() if v is not None})
    return out


# -- schema -----------------------------------------------------------------------------------
def _normalize_type(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
    ):
        return f"list<{_normalize_type(t.value_type)}>"
    if pa.types.is_timestamp(t):
        return "timestamp[tz]" if t.tz else "timestamp"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_normalize_type(f.type)}" for f in t) + ">"
    if pa.types.is_dictionary(t):
        return _normalize_type(t.value_type)
    return str(t)


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
    table_types = {f.name: _normalize_type(f.type) for f in table_schema}
    data_types = {f.name: _normalize_type(f.type) for f in data_schema}
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


def overwrite_partition(
    uri: str,
    data: pa.Table,
    partition: Mapping[str, object],
    *,
    partition_by: Sequence[str] | None = None,
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """Replace exactly ``partition`` of the table with ``data`` in one commit; return the new version.

    Creates the table (partitioned by ``partition_by``, default the partition's columns) when it
    does not exist. Re-running with the same data leaves the same content.
    """
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri = normalize_uri(uri)
    spec = part.validate_partition(partition)
    columns = list(partition_by or sorted(spec))
    if set(columns) != set(spec):
        raise InvalidSpecError(f"partition {spec} must name exactly the partition columns {columns}")
    data = _with_partition_columns(data, spec)
    check_schema(table_arrow_schema(uri, storage_options), data.schema, schema_mode=schema_mode, where=uri)
    with partition_lock(uri, part.path_of(spec, columns), storage_options):
        try:
            write_deltalake(
                uri,
                data,
                mode="overwrite",
                predicate=part.predicate(spec),
                partition_by=columns,
                schema_mode="merge" if schema_mode == "merge" else None,
                storage_options=storage_options or None,
                commit_properties=CommitProperties(custom_metadata=dict(metadata or {})),
            )
        except CommitFailedError as err:
            raise CommitConflictError(
                f"concurrent write to {spec} of {uri}; nothing was committed: {err}"
            ) from err
        return _own_commit(uri, spec, storage_options)


def _own_commit(uri: str, spec: dict[str, str], storage_options: StorageOptions | None) -> DeltaRef:
    """The version this write committed: the newest commit touching ``spec`` while we hold its lock.

    Not simply the newest version: writers of other partitions may have committed since.
    """
    from airflow_provider_dltrain.exceptions import TableNotFoundError
    from airflow_provider_dltrain.lake.history import partition_commit

    try:
        return partition_commit(uri, spec, storage_options=storage_options)
    except TableNotFoundError:  # an empty write into a partition that never had files
        log = DeltaLog(uri, storage_options)
        return log.ref(log.latest_version() or 0)


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file already written inside the table directory by another engine (Spark)."""

    path: str  # relative to the table root
    size: int
    num_records: int
    stats: str  # Delta stats JSON
    modification_time: int  # epoch millis


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
) -> DeltaRef:
    """Commit already-written files as the new content of ``partition`` (one atomic overwrite).

    ``schema`` is the table schema including the partition columns. Under the partition lock the
    snapshot is refreshed first, so whatever another run committed meanwhile is replaced, never
    duplicated.
    """
    from deltalake import CommitProperties, DeltaTable, Schema
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

    uri = normalize_uri(uri)
    spec = part.validate_partition(partition)
    columns = list(partition_by)
    if set(columns) != set(spec):
        raise InvalidSpecError(f"partition {spec} must name exactly the partition columns {columns}")
    adds = [AddAction(f.path, f.size, dict(spec), f.modification_time, True, f.stats) for f in files]
    props = CommitProperties(custom_metadata=dict(metadata or {}))
    delta_schema = Schema.from_arrow(schema)
    with partition_lock(uri, part.path_of(spec, columns), storage_options):
        existing = table_arrow_schema(uri, storage_options)
        created = False
        if existing is None:
            try:
                create_table_with_add_actions(
                    uri,
                    delta_schema,
                    adds,
                    mode="error",
                    partition_by=columns,
                    configuration=dict(configuration or {}) or None,
                    storage_options=storage_options or None,
                    commit_properties=props,
                )
                created = True
            except Exception as err:  # another writer created the table first: retry as an overwrite
                if DeltaLog(uri, storage_options).latest_version() is None:
                    raise
                existing = table_arrow_schema(uri, storage_options)
                del err
        if not created and existing is not None:
            added = check_schema(existing, schema, schema_mode=schema_mode, where=uri)
            table = DeltaTable(uri, storage_options=storage_options or None)
            if added:
                table.alter.add_columns([f for f in delta_schema.fields if f.name in added])
                table.update_incremental()
            actions: list[AddAction | RemoveAction] = list(adds)
            table.create_write_transaction(
                actions,
                mode="overwrite",
                # the table's own schema: column order or nullability in the data must never rewrite it
                schema=table.schema(),
                partition_by=columns,
                partition_filters=part.filters(spec),
                commit_properties=props,
            )
        return _own_commit(uri, spec, storage_options)
