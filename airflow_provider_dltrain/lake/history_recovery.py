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

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake.history_index import HistoryIndex, Key
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions

logger = logging.getLogger(__name__)

_COMPARE = {
    "=": lambda a, b: a == b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}


def _text(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        return [str(v) for v in value]
    return str(value)


def may_select(values: Mapping[str, Any], filters: Any) -> bool:
    """Whether a partition (its values) can hold rows the DNF ``filters`` select.

    Only partition columns decide, compared as text (right for ISO dates and the provider's
    partition values); a predicate on another column, or one that cannot be evaluated, may select.
    """
    if not filters:
        return True
    conjunctions: Sequence[Any] = filters
    if (
        conjunctions
        and isinstance(conjunctions[0], (list, tuple))
        and len(conjunctions[0]) == 3
        and isinstance(conjunctions[0][0], str)
    ):
        conjunctions = [conjunctions]  # one conjunction given flat
    for conj in conjunctions:
        ok = True
        for column, op, value in conj:
            if column not in values or values[column] is None or op not in _COMPARE:
                continue
            try:
                if not _COMPARE[op](str(values[column]), _text(value)):
                    ok = False
                    break
            except TypeError:
                continue
        if ok:
            return True
    return False


def _changed(
    index: HistoryIndex, after: int, upto: int, filters: Any, *, rearranged: bool = False
) -> list[Key]:
    touched = index.touched_between(after, upto, rearranged=rearranged)
    return sorted(key for key in touched if may_select(dict(key), filters))


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
    rows (log retention removed its commit files, or a VACUUM removed files a compaction rewrote);
    else :class:`TableNotFoundError` saying what is gone and what to do.
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
        readable = _oldest_readable(index._require_log(), ref.version, index.indexed)
        if readable is None:
            raise TableNotFoundError(f"{ref.uri} has no readable version at or after {ref.version}")
        _refuse_if_changed(
            ref,
            index,
            readable,
            filters,
            "its commit files were removed by the table's log "
            f"retention (delta.logRetentionDuration; the oldest readable version is {readable})",
        )
        version, table = readable, open_table(ref.uri, readable, storage_options)
    missing = _missing_files(ref.uri, version, table, index, storage_options, filters)
    if missing:
        # only a compaction since? then the newest version holds the same rows in files that exist
        _refuse_if_changed(
            ref,
            index,
            index.indexed,
            filters,
            f"{len(missing)} of its data file(s) were deleted "
            f"by a VACUUM (delta.deletedFileRetentionDuration), e.g. {missing[:3]}",
        )
        version, table = index.indexed, open_table(ref.uri, index.indexed, storage_options)
    if version != ref.version:
        logger.warning(
            "version %d of %s cannot be read as it was (its log or files were removed by retention); reading "
            "its rows from version %d: no commit in between changed the partitions read, so the rows are the same",
            ref.version,
            ref.uri,
            version,
        )
    return table


def _refuse_if_changed(ref: DeltaRef, index: HistoryIndex, upto: int, filters: Any, why: str) -> None:
    changed = _changed(index, ref.version, upto, filters)
    if changed:
        raise TableNotFoundError(
            f"version {ref.version} of {ref.uri} cannot be read any more: {why}, and partitions it selects "
            f"changed since ({_names(changed)}), so no readable version holds the same rows. Re-run the date "
            "without the old pin to compute it on today's data (the backfill report says what changed), or "
            "restore the log and files from a backup; keep them for the backfill horizon with `dltrain history "
            f"retain {ref.uri}`."
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
) -> list[str]:
    """Data files of ``version`` in selected partitions that a VACUUM removed.

    Only partitions some later commit touched (a compaction included) can have lost files: a file
    live at the newest version is never vacuumed. So only theirs are checked, usually none.
    """
    if index.indexed <= version:
        return []
    changed = set(_changed(index, version, index.indexed, filters, rearranged=True))
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
