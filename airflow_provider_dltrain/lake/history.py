"""Which commits last changed which partitions: the versions a backfill must pin to reproduce a run.

Answered from the table's history index (:mod:`.history_index`), which the provider's writes keep
beside the log: a pin, a partition's last write and the digests of the partitions a run reads cost
the same few reads on day two and in year two, and survive the log retention that removes old
commit files. :func:`walk_back` is the plain backward walk over commit files, for what the index
does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.filters import compiled_term
from airflow_provider_dltrain.lake.history_index import HistoryIndex, Write, key_of
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.partition import META_DIGEST, META_PARTITION
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri

logger = logging.getLogger(__name__)

PartitionValues = dict[str, Any]  # as in the log: column -> string, or None for a null value
Key = tuple[tuple[str, Any], ...]
LINEAGE_KEYS = ("dag_id", "run_id", "task_id", "try_number", "logical_date")


class LogRetentionError(TableNotFoundError):
    """The walk reached a commit file removed by the table's log retention."""


@dataclass(frozen=True)
class Commit:
    """One commit as the walk sees it: its version, ``commitInfo`` and the partitions it touched."""

    version: int
    info: dict[str, Any]
    partitions: tuple[PartitionValues, ...]  # of the files it added or removed, each once
    changes_metadata: bool = False  # it carries a ``metaData`` action (schema, partitioning, properties)

    def ref(self, uri: str) -> DeltaRef:
        return DeltaRef(uri, self.version, millis_to_iso(self.info.get("timestamp")))


def _sort_key(key: Key) -> tuple[tuple[str, str], ...]:
    return tuple((c, "" if v is None else str(v)) for c, v in key)  # a null partition value sorts first


def _commit(version: int, actions: list[dict[str, Any]]) -> Commit:
    # The walk sees every commit that added or removed files of a partition, compactions (dataChange
    # false) included. Pins do not: the history index skips compactions (same rows), and a read of a
    # pinned version whose compacted files a VACUUM removed falls forward to the compaction
    # (lake.history_recovery). VACUUM and table-property commits touch no file.
    info: dict[str, Any] = {}
    touched: dict[Key, PartitionValues] = {}
    for action in actions:
        info = dict(action["commitInfo"]) if "commitInfo" in action else info
        body = action.get("add") or action.get("remove")
        if body:
            values = dict(body.get("partitionValues") or {})
            touched.setdefault(key_of(values), values)
    metadata = any("metaData" in action for action in actions)
    return Commit(version, info, tuple(touched.values()), metadata)


def walk_back(log: DeltaLog, newest: int, what: str) -> Iterator[Commit]:
    """Commits from ``newest`` down to version 0, newest first.

    :param what: what the caller looks for, for the error raised when the log was cleaned up.
    :raises LogRetentionError: a commit file older than the checkpoint was removed.
    """
    for version in range(newest, -1, -1):
        try:
            actions = log.commit_actions(version)
        except TableNotFoundError:
            raise LogRetentionError(
                f"{what} of {log.uri} was last written before version {version + 1}, the oldest commit "
                "still in the log (older ones were removed by the table's log retention, "
                "delta.logRetentionDuration). Re-run the ingest of that partition to pin it again, and keep "
                "the log as long as backfills must reproduce history."
            ) from None
        yield _commit(version, actions)


def newest_writes(
    log: DeltaLog, newest: int, wanted: Collection[Key], what: str, *, stop_at_gap: bool = False
) -> dict[Key, Commit]:
    """The newest commit at or before ``newest`` touching each wanted partition (exact keys), from the
    history index: ``info`` holds the digest and partition it recorded (nothing for another tool's).

    A partition whose last write is older than the retained log is answered with the oldest
    readable version (an inferred write, no digest). ``what`` and ``stop_at_gap`` are kept for callers
    of the walk this replaced; nothing is missing from the result unless no commit wrote it.
    """
    found: dict[Key, Commit] = {}
    if not wanted:
        return found
    index = history_index.load(log.uri, log.storage_options, newest=newest)
    if index is None:
        return found
    for key in wanted:
        write = index.last_write(key, newest)
        if write is None:
            continue
        info: dict[str, Any] = {"timestamp": write.timestamp}
        if write.content_known:  # a compaction of a recorded write keeps its digest
            info[META_PARTITION] = history_index.canonical(key)
            if write.digest:
                info[META_DIGEST] = write.digest
            info.update(write.who or {})
        found[key] = Commit(write.version, info, (dict(key),))
    return found


def _index(uri: str, at_version: int | None, storage_options: StorageOptions | None) -> HistoryIndex:
    index = history_index.load(uri, storage_options, newest=at_version)
    if index is None:
        raise TableNotFoundError(f"no Delta table at {normalize_uri(uri)}")
    return index


def _pin(index: HistoryIndex, write: Write | None, what: str, at_version: int | None) -> DeltaRef:
    if write is None:
        upto = index.indexed if at_version is None else at_version
        raise TableNotFoundError(
            f"no commit of {index.uri} up to version {upto} wrote {what}; has it been ingested?"
        )
    if write.inferred:
        logger.warning(
            "%s of %s was last written before version %d, the oldest version its log still holds (older "
            "commit files were removed by the table's log retention); pinned to version %d, which holds "
            "the same content",
            what,
            index.uri,
            write.version,
            write.version,
        )
    return write.ref(index.uri)


def _at_or_before(
    bound: Mapping[str, str], types: Mapping[str, str] | None
) -> Callable[[PartitionValues], bool]:
    """Whether a partition is ``<=`` the bound in every column, compared in the column's type (an int
    ``h=9`` is before ``h=10``); a null value is not; a value that cannot be compared exactly counts as
    before (the pin can only move later, to a version with the same rows up to the bound)."""

    # each bound value converted to its column's type once, not once per partition of a long history;
    # a string column's text is its value, compared as it is
    known = types or {}
    texts = [(c, v) for c, v in bound.items() if known.get(c) == "string" and isinstance(v, str)]
    terms = [(c, compiled_term("<=", v, known.get(c))) for c, v in bound.items() if (c, v) not in texts]

    def before(values: PartitionValues) -> bool:
        return all((t := values.get(c)) is not None and t <= v for c, v in texts) and all(
            values.get(c) is not None and term(values[c]) is not False for c, term in terms
        )

    return before


def partition_column_types(uri: str, storage_options: StorageOptions | None = None) -> dict[str, str] | None:
    """``{partition column: Delta type}`` of the table's newest schema, from its history index."""
    return _index(uri, None, storage_options).partition_types


def partition_commit(
    uri: str,
    partition: Mapping[str, object],
    at_version: int | None = None,
    storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """The newest version (at or before ``at_version``) whose commit added or removed files of ``partition``.

    Reading the table at that version gives the partition exactly as it is now, and every earlier
    partition as it was when this one was written — the same bytes whenever the run is repeated,
    however many later partitions were appended since. Answered from the table's history index
    (:mod:`.history_index`): the same few reads however long the history. When that commit's log
    was removed before the index knew it, the oldest readable version stands in (same content).
    """
    wanted = part.validate_partition(partition)
    index = _index(uri, at_version, storage_options)
    key = key_of(wanted)
    write = next(
        (
            w
            for w in reversed(index.writes.get(key) or [])
            if w.files and w.version <= _upto(index, at_version)
        ),
        None,
    )
    return _pin(index, write, f"partition {wanted}", at_version)


def _upto(index: HistoryIndex, at_version: int | None) -> int:
    return index.indexed if at_version is None else at_version


def cutoff_commit(
    uri: str,
    upper: Mapping[str, object],
    at_version: int | None = None,
    storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """The newest version (at or before ``at_version``) that changed any partition ``<= upper``.

    For each column of ``upper`` a partition's value must be ``<=`` the given one, compared in the
    column's type (string order for strings, right for ISO dates; numbers, dates and timestamps by value). Reading that version gives every partition up to the cutoff as it is now:
    partitions appended later never move it, a restatement of an earlier partition does. This is
    the version a training run on ``ds <= D`` pins, so that it sees restated history.
    """
    bound = part.validate_partition(upper, field="upper", bounds=True)
    index = _index(uri, at_version, storage_options)
    write = index.newest_touching(_at_or_before(bound, index.partition_types), at_version, bound)
    return _pin(index, write, f"any partition <= {bound}", at_version)


def _live_partitions(uri: str, version: int, storage_options: StorageOptions | None) -> list[PartitionValues]:
    from airflow_provider_dltrain.lake.table import open_table

    try:
        return [dict(p) for p in open_table(uri, version, storage_options).partitions()]
    except TableNotFoundError:  # the version's log is gone: the index knows which partitions held rows
        index = _index(uri, None, storage_options)
        return [dict(key) for key in index.live_at(version)]


def _lineage(values: PartitionValues, write: Write) -> dict[str, Any]:
    who = dict(write.who or {})
    return {
        "partition": dict(sorted(values.items())),
        "version": write.version,
        "timestamp": millis_to_iso(write.timestamp),
        "digest": write.digest,
        **{k: who.get(f"airflow.{k}") for k in LINEAGE_KEYS},
    }


def partition_commits(
    uri: str,
    at_version: int | None,
    upper: Mapping[str, object] | None = None,
    storage_options: StorageOptions | None = None,
) -> list[dict[str, Any]]:
    """Every partition live at ``at_version`` (only those ``<= upper`` when given), with the commit
    that last wrote it: ``partition``, ``version``, ``timestamp``, the Airflow task that committed
    (``dag_id``, ``run_id``, ``task_id``, ``try_number``, ``logical_date``; ``None`` when unknown) and
    the content ``digest`` that commit recorded (``None`` when it recorded none). Sorted by partition.

    The lineage of data read at ``at_version``, from the table's history index: no commit file is
    read however many partitions there are.
    """
    index = _index(uri, at_version, storage_options)
    newest = _upto(index, at_version)
    live = _live_partitions(index.uri, newest, storage_options)
    if upper is not None:
        keep = _at_or_before(
            part.validate_partition(upper, field="upper", bounds=True), index.partition_types
        )
        live = [values for values in live if keep(values)]
    out = []
    for values in sorted(live, key=lambda v: _sort_key(key_of(v))):
        write = index.last_write(key_of(values), newest)
        if write is None:  # live files no commit in the log added: a log rewritten by hand
            raise TableNotFoundError(
                f"no commit of {index.uri} up to version {newest} wrote partition {values}"
            )
        if not write.content_known:  # written by another tool: no digest of this partition
            write = Write(write.version, write.timestamp, None, write.flags, None)
        out.append(_lineage(values, write))
    return out
