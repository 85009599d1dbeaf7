"""Reading a pinned version after log retention or VACUUM removed what it needs, or saying why not.

A pin names version v. Reading v needs a checkpoint at or before it plus the commit files after,
and the data files it lists. A table kept within the backfill horizon (:mod:`.retention`) has both;
one written with Delta's defaults loses its commit files after a checkpoint and 30 days, and the
files of replaced versions after 7 days and a VACUUM.

The rows a reader selects from v are the same at any later version r when no commit in ``(v, r]``
touched a partition the reader selects: so v is read from the oldest readable version r, with a
warning naming both. When such a commit exists, or a selected partition's files are gone, the
version cannot be reproduced: the error says what is missing and what to do, and nothing is
recomputed into a different answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.exceptions import HistoryGoneError, TableNotFoundError
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake.filters import partition_may_select, partition_types
from airflow_provider_dltrain.lake.history_index import HistoryIndex, Key
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions

logger = logging.getLogger(__name__)


def _changed(
    index: HistoryIndex,
    after: int,
    upto: int,
    filters: Any,
    types: Mapping[str, str] | None,
    *,
    rearranged: bool = False,
) -> list[Key]:
    touched = index.touched_between(after, upto, rearranged=rearranged)
    return sorted(key for key in touched if partition_may_select(dict(key), filters, types))


def table_partition_types(table: Any) -> dict[str, str] | None:
    """``{partition column: Delta type}`` of an open ``DeltaTable``'s version (None when unreadable)."""
    return partition_types(table.schema().to_json(), table.metadata().partition_columns)


def _oldest_readable(log: DeltaLog, version: int, newest: int) -> int | None:
    """The oldest version at or after ``version`` whose log can still be read (a checkpoint there or
    before, and every commit file after it): after log clean-up, the oldest commit file kept."""
    checkpoint = log.last_checkpoint()
    first = history_index._first_existing_commit(log, version, newest)
    if first is None:
        return int(checkpoint["version"]) if checkpoint else None
    return first


def readable_from(uri: str, version: int, storage_options: StorageOptions | None = None) -> int | None:
    """The version ``version`` is read from when its own log is gone (the oldest readable one), or
    None when it can be read as it is. Probes the log only: a few existence checks."""
    log = DeltaLog(uri, storage_options)
    if log.commit_exists(version):
        return None
    newest = log.latest_version()
    if newest is None or version > newest:
        return None
    return _oldest_readable(log, version, newest)


def open_for_rows(ref: DeltaRef, storage_options: StorageOptions | None, filters: Any) -> Any:
    """A ``DeltaTable`` that gives exactly the rows ``ref``'s version gives a reader selecting ``filters``.

    ``ref``'s own version when it can be read; else the oldest later version with the same selected
    rows and the same schema and partitioning (log retention removed its commit files, or a VACUUM
    removed files a compaction rewrote); else :class:`HistoryGoneError` (a
    :class:`TableNotFoundError`) saying what is gone, what differs and what to do.
    """
    from airflow_provider_dltrain.lake.table import open_table

    try:
        table = open_table(ref.uri, ref.version, storage_options)
    except TableNotFoundError:
        log = DeltaLog(ref.uri, storage_options)
        newest = log.latest_version()
        if newest is None or ref.version > newest:
            raise
        table = None
    index = history_index.load(ref.uri, storage_options)
    if index is None:  # the table is gone since
        raise TableNotFoundError(f"no Delta table at {ref.uri}")
    version = ref.version
    if table is None:
        version, table = _from_oldest_readable(ref, index, filters, storage_options)
    types = table_partition_types(table)
    missing = _missing_files(ref.uri, version, table, index, storage_options, filters, types)
    if missing:
        # only a compaction since? then the newest version holds the same rows in files that exist
        why = (
            f"{len(missing)} of its data file(s) were deleted by a VACUUM "
            f"(delta.deletedFileRetentionDuration), e.g. {missing[:3]}"
        )
        _refuse_if_changed(ref, index, index.indexed, filters, types, why)
        newest_table = open_table(ref.uri, index.indexed, storage_options)
        require_same_columns(ref, schema_fields(table), version, schema_fields(newest_table), index.indexed)
        version, table = index.indexed, newest_table
    if version != ref.version:
        logger.warning(
            "version %d of %s cannot be read as it was (its log or files were removed by retention); reading "
            "its rows from version %d: no commit in between changed the partitions read or the table's "
            "schema, so the rows are the same",
            ref.version,
            ref.uri,
            version,
        )
    return table


def _from_oldest_readable(
    ref: DeltaRef, index: HistoryIndex, filters: Any, storage_options: StorageOptions | None
) -> tuple[int, Any]:
    """The oldest readable version and its table, when it holds ``ref``'s selected rows and columns."""
    from airflow_provider_dltrain.lake.table import open_table

    readable = _oldest_readable(index._require_log(), ref.version, index.indexed)
    if readable is None:
        raise TableNotFoundError(f"{ref.uri} has no readable version at or after {ref.version}")
    table = open_table(ref.uri, readable, storage_options)  # first: its schema types the partition values
    why = (
        "its commit files were removed by the table's log retention "
        f"(delta.logRetentionDuration; the oldest readable version is {readable})"
    )
    _refuse_if_changed(ref, index, readable, filters, table_partition_types(table), why)
    shape_changes = schema_changes_between(index, ref.version, readable)
    if shape_changes is None or shape_changes:
        raise HistoryGoneError(
            f"version {ref.version} of {ref.uri} cannot be read any more: {why}, and "
            f"{_shape_changes_text(shape_changes, ref.version, readable)}, so version {readable}'s columns "
            f"({_columns_text(schema_fields(table))}) are not proven to be version {ref.version}'s"
            f"{_file_hint(table, filters)}. {_what_to_do(ref.uri)}"
        )
    return readable, table


def _what_to_do(uri: str) -> str:
    return (
        "Re-run the date without the old pin to compute it on today's data (the backfill report says what "
        "changed), or restore the log and files from a backup; keep them for the backfill horizon with "
        f"`dltrain history retain {uri}`."
    )


def _refuse_if_changed(
    ref: DeltaRef, index: HistoryIndex, upto: int, filters: Any, types: Mapping[str, str] | None, why: str
) -> None:
    changed = _changed(index, ref.version, upto, filters, types)
    if changed:
        raise HistoryGoneError(
            f"version {ref.version} of {ref.uri} cannot be read any more: {why}, and partitions it selects "
            f"changed since ({_names(changed)}), so no readable version holds the same rows. {_what_to_do(ref.uri)}"
        )


def _names(keys: Sequence[Key]) -> str:
    shown = ", ".join("/".join(f"{c}={v}" for c, v in key) for key in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _missing_files(
    uri: str,
    version: int,
    table: Any,
    index: HistoryIndex,
    storage_options: StorageOptions | None,
    filters: Any,
    types: Mapping[str, str] | None,
) -> list[str]:
    """Data files of ``version`` in selected partitions that a VACUUM removed.

    Only partitions some later commit touched (a compaction included) can have lost files: a file
    live at the newest version is never vacuumed. So only theirs are checked, usually none.
    """
    if index.indexed <= version:
        return []
    changed = set(_changed(index, version, index.indexed, filters, types, rearranged=True))
    if not changed:
        return []
    from airflow_provider_dltrain.lake.storage import filesystem

    fs, _ = filesystem(uri, storage_options)
    missing = []
    for file_uri in table.file_uris():
        if history_index.key_of(_partition_of(file_uri)) not in changed:
            continue
        path = file_uri.split("://", 1)[1] if "://" in file_uri else file_uri
        if fs.get_file_info(path).type.name == "NotFound":
            missing.append(file_uri)
    return missing


def _partition_of(uri: str) -> dict[str, str]:
    from urllib.parse import unquote

    values = {}
    for part in uri.split("/")[:-1]:
        if "=" in part:
            column, value = part.split("=", 1)
            values[unquote(column)] = unquote(value)
    return values


# -- the schema a version is read with --------------------------------------------------------------
def schema_changes_between(index: HistoryIndex, version: int, upto: int) -> list[int] | None:
    """Versions in ``(version, upto]`` that changed the table's schema or partitioning (a column
    added, dropped or retyped; a property change is not one); ``None`` when the index cannot tell,
    because commits after ``version`` were gone before it was built (``version`` below its floor)."""
    if version < index.floor:
        return None
    return [v for v in index.metadata_versions if version < v <= upto]


def schema_fields(table: Any) -> dict[str, str]:
    """``{column: Delta type (JSON)}`` of an open ``DeltaTable``'s version, partition columns marked
    ``partition:<column>`` so a change of partitioning is a difference too."""
    fields = {
        f["name"]: json.dumps(f["type"], sort_keys=True)
        for f in json.loads(table.schema().to_json())["fields"]
    }
    fields.update({f"partition:{c}": "" for c in table.metadata().partition_columns})
    return fields


def column_differences(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """How the columns ``after`` differ from ``before`` (both from :func:`schema_fields`), one phrase
    each, sorted: ``column 'c' added``, ``column 'x' dropped``, ``column 'x' retyped long -> string``."""
    out = []
    for name in sorted(set(before) | set(after)):
        what = f"partition column {name[10:]!r}" if name.startswith("partition:") else f"column {name!r}"
        if name not in before:
            out.append(f"{what} added")
        elif name not in after:
            out.append(f"{what} dropped")
        elif before[name] != after[name]:
            out.append(f"{what} retyped {json.loads(before[name])} -> {json.loads(after[name])}")
    return out


def require_same_columns(
    ref: DeltaRef, before: Mapping[str, str], version: int, after: Mapping[str, str], upto: int
) -> None:
    """Refuse to serve ``ref`` (read as ``version``) from ``upto`` when their columns differ."""
    differences = column_differences(before, after)
    if differences:
        raise HistoryGoneError(
            f"version {ref.version} of {ref.uri} cannot be read any more: data files it needs were deleted "
            f"by a VACUUM, and the newest version {upto}, which holds the same rows in other files, has "
            f"other columns than version {version} ({'; '.join(differences)}). {_what_to_do(ref.uri)}"
        )


def _shape_changes_text(changes: list[int] | None, version: int, readable: int) -> str:
    if changes is None:
        return (
            f"the commits between them were gone before the table's history index recorded them, so "
            f"whether its schema changed after version {version} is not known"
        )
    which = ", ".join(str(v) for v in changes)
    return f"commit(s) {which} changed the table's schema or partitioning after version {version}"


def _columns_text(fields: Mapping[str, str]) -> str:
    return ", ".join(f"{name}: {json.loads(kind)}" if kind else name for name, kind in sorted(fields.items()))


def _file_hint(table: Any, filters: Any, limit: int = 20) -> str:
    """Which columns the data files of the selected rows (written at or before the pinned version) lack
    or add against the readable version's schema: a hint naming the column, read from up to ``limit``
    Parquet footers; empty when they agree or cannot be read."""
    import pyarrow.parquet as pq

    try:
        files = table.file_uris(file_pruning_predicate=filters or None)[:limit]
        in_files: set[str] = set()
        for uri in files:
            in_files |= set(
                pq.read_schema(uri.split("://", 1)[-1] if uri.startswith("file://") else uri).names
            )
    except Exception:  # a hint only: the refusal stands without it
        return ""
    if not files:
        return ""
    partition_columns = set(table.metadata().partition_columns)
    columns = {f["name"] for f in json.loads(table.schema().to_json())["fields"]} - partition_columns
    lacking, extra = sorted(columns - in_files), sorted(in_files - columns - partition_columns)
    parts = [f"column {c!r} is in no file of the rows read (added since?)" for c in lacking]
    parts += [f"column {c!r} is in their files but not in the table now (dropped since?)" for c in extra]
    return f": {'; '.join(parts)}" if parts else ""
