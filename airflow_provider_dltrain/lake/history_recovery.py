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


def _changed(index: HistoryIndex, after: int, upto: int, filters: Any) -> list[Key]:
    return sorted(key for key in index.touched_between(after, upto) if may_select(dict(key), filters))


def _oldest_readable(log: DeltaLog, version: int, newest: int) -> int | None:
    """The oldest version at or after ``version`` whose log can still be read (a checkpoint there or
    before, and every commit file after it): after log clean-up, the oldest commit file kept."""
    checkpoint = log.last_checkpoint()
    first = history_index._first_existing_commit(log, version, newest)
    if first is None:
        return int(checkpoint["version"]) if checkpoint else None
    return first


def open_for_rows(ref: DeltaRef, storage_options: StorageOptions | None, filters: Any) -> Any:
    """A ``DeltaTable`` that gives exactly the rows ``ref``'s version gives a reader selecting ``filters``."""
    from airflow_provider_dltrain.lake.table import open_table

    try:
        table = open_table(ref.uri, ref.version, storage_options)
    except TableNotFoundError:
        log = DeltaLog(ref.uri, storage_options)
        newest = log.latest_version()
        if newest is None or ref.version > newest:
            raise
        return _read_later(ref, log, newest, storage_options, filters)
    _check_files(ref, table, storage_options, filters)
    return table


def _read_later(
    ref: DeltaRef, log: DeltaLog, newest: int, storage_options: StorageOptions | None, filters: Any
) -> Any:
    from airflow_provider_dltrain.lake.table import open_table

    readable = _oldest_readable(log, ref.version, newest)
    index = history_index.load(ref.uri, storage_options)
    if readable is None or index is None:
        raise TableNotFoundError(f"{ref.uri} has no readable version at or after {ref.version}")
    changed = _changed(index, ref.version, readable, filters)
    if changed:
        raise TableNotFoundError(
            f"version {ref.version} of {ref.uri} cannot be read any more: its commit files were removed by the "
            f"table's log retention (delta.logRetentionDuration; the oldest readable version is {readable}), and "
            f"partitions it selects changed since ({_names(changed)}), so no readable version holds the same "
            "rows. Re-run the date without the old pin to compute it on today's data (the backfill report "
            "says what changed), and keep the log for the backfill horizon: `dltrain history retain "
            f"{ref.uri}`."
        )
    logger.warning(
        "version %d of %s is older than its retained log (removed by delta.logRetentionDuration); reading it "
        "from version %d, the oldest readable one: no commit in between touched the partitions read, so "
        "the rows are the same",
        ref.version,
        ref.uri,
        readable,
    )
    table = open_table(ref.uri, readable, storage_options)
    _check_files(DeltaRef(ref.uri, readable, ref.timestamp), table, storage_options, filters)
    return table


def _names(keys: Sequence[Key]) -> str:
    shown = ", ".join("/".join(f"{c}={v}" for c, v in key) for key in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _check_files(ref: DeltaRef, table: Any, storage_options: StorageOptions | None, filters: Any) -> None:
    """Refuse, naming them, the data files of selected partitions a VACUUM removed.

    Only partitions some later commit touched can have lost files (a file live at the newest
    version is never vacuumed), so only theirs are checked: usually none.
    """
    index = history_index.load(ref.uri, storage_options)
    if index is None or index.indexed <= ref.version:
        return
    changed = set(_changed(index, ref.version, index.indexed, filters))
    if not changed:
        return
    from airflow_provider_dltrain.lake.storage import filesystem

    fs, _ = filesystem(ref.uri, storage_options)
    missing = []
    for uri in table.file_uris():
        values = _partition_of(uri)
        if history_index.key_of(values) not in changed:
            continue
        path = uri.split("://", 1)[1] if "://" in uri else uri
        if fs.get_file_info(path).type.name == "NotFound":
            missing.append(uri)
    if missing:
        raise TableNotFoundError(
            f"version {ref.version} of {ref.uri} cannot be read any more: {len(missing)} of its data file(s) "
            f"were deleted by a VACUUM (delta.deletedFileRetentionDuration), e.g. {missing[:3]}. The partitions "
            "they held were rewritten since; re-run the date without the old pin to compute it on today's data, "
            "or restore the files from a backup. Keep removed files for the backfill horizon: `dltrain history "
            f"retain {ref.uri}`."
        )


def _partition_of(uri: str) -> dict[str, str]:
    from urllib.parse import unquote

    values = {}
    for part in uri.split("/")[:-1]:
        if "=" in part:
            column, value = part.split("=", 1)
            values[unquote(column)] = unquote(value)
    return values
