"""Which commits last changed which partitions: the versions a backfill must pin to reproduce a run.

Everything here is one backward walk over commit files (:func:`walk_back`): its cost is the number of
commits made after the partitions asked about were written, never the size of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.partition import META_DIGEST, META_PARTITION, canonical_partition
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions

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


def key_of(values: Mapping[str, Any]) -> Key:
    return tuple(sorted(values.items()))


def _sort_key(key: Key) -> tuple[tuple[str, str], ...]:
    return tuple((c, "" if v is None else str(v)) for c, v in key)  # a null partition value sorts first


def _commit(version: int, actions: list[dict[str, Any]]) -> Commit:
    # Files added or removed with dataChange=false (OPTIMIZE) count as touching their partitions: the
    # pins below then move to the compaction, which reads the same rows and, unlike the version
    # before it, stays readable after a VACUUM deletes the compacted files. VACUUM and table-property
    # commits touch no file, so no pin ever moves for them.
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
    """The newest commit at or before ``newest`` touching each wanted partition (exact keys).

    Stops as soon as every partition is found. With ``stop_at_gap`` a cleaned-up log ends the walk
    quietly and the partitions not found yet are missing from the result.
    """
    remaining = set(wanted)
    found: dict[Key, Commit] = {}
    if not remaining:
        return found
    try:
        for commit in walk_back(log, newest, what):
            for values in commit.partitions:
                key = key_of(values)
                if key in remaining:
                    found[key] = commit
                    remaining.discard(key)
            if not remaining:
                break
    except LogRetentionError:
        if not stop_at_gap:
            raise
    return found


def _first_touching(
    log: DeltaLog, newest: int, what: str, matches: Callable[[PartitionValues], bool]
) -> DeltaRef:
    for commit in walk_back(log, newest, what):
        if any(matches(values) for values in commit.partitions):
            return commit.ref(log.uri)
    raise TableNotFoundError(
        f"no commit of {log.uri} up to version {newest} wrote {what}; has it been ingested?"
    )


def _newest(log: DeltaLog, at_version: int | None) -> int:
    newest = log.latest_version() if at_version is None else at_version
    if newest is None:
        raise TableNotFoundError(f"no Delta table at {log.uri}")
    return newest


def _at_or_before(bound: Mapping[str, str]) -> Callable[[PartitionValues], bool]:
    # string order: ISO dates and zero-padded values compare as their meaning does
    return lambda values: all(values.get(c) is not None and str(values[c]) <= v for c, v in bound.items())


def partition_commit(
    uri: str,
    partition: Mapping[str, object],
    at_version: int | None = None,
    storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """The newest version (at or before ``at_version``) whose commit added or removed files of ``partition``.

    Reading the table at that version gives the partition exactly as it is now, and every earlier
    partition as it was when this one was written — the same bytes whenever the run is repeated,
    however many later partitions were appended since. Walks commit files backwards; its cost is
    the number of commits made after the partition was written.
    """
    wanted = part.validate_partition(partition)
    log = DeltaLog(uri, storage_options)
    return _first_touching(
        log,
        _newest(log, at_version),
        f"partition {wanted}",
        lambda values: all(values.get(c) == v for c, v in wanted.items()),
    )


def cutoff_commit(
    uri: str,
    upper: Mapping[str, object],
    at_version: int | None = None,
    storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """The newest version (at or before ``at_version``) that changed any partition ``<= upper``.

    For each column of ``upper`` a partition's value must be ``<=`` the given one (string order, right
    for ISO dates). Reading that version gives every partition up to the cutoff as it is now:
    partitions appended later never move it, a restatement of an earlier partition does. This is
    the version a training run on ``ds <= D`` pins, so that it sees restated history.
    """
    bound = part.validate_partition(upper, field="upper", bounds=True)
    log = DeltaLog(uri, storage_options)
    return _first_touching(log, _newest(log, at_version), f"any partition <= {bound}", _at_or_before(bound))


def _live_partitions(uri: str, version: int, storage_options: StorageOptions | None) -> list[PartitionValues]:
    from airflow_provider_dltrain.lake.table import open_table

    return [dict(p) for p in open_table(uri, version, storage_options).partitions()]


def _lineage(values: PartitionValues, commit: Commit) -> dict[str, Any]:
    info = commit.info
    recorded = info.get(META_PARTITION) == canonical_partition(values)
    return {
        "partition": dict(sorted(values.items())),
        "version": commit.version,
        "timestamp": millis_to_iso(info.get("timestamp")),
        "digest": info.get(META_DIGEST) if recorded else None,
        **{k: info.get(f"airflow.{k}") for k in LINEAGE_KEYS},
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

    The lineage of data read at ``at_version``: one backward walk of the log, which stops at the
    oldest of those commits.
    """
    log = DeltaLog(uri, storage_options)
    newest = _newest(log, at_version)
    live = _live_partitions(log.uri, newest, storage_options)
    if upper is not None:
        keep = _at_or_before(part.validate_partition(upper, field="upper", bounds=True))
        live = [values for values in live if keep(values)]
    wanted = {key_of(values): values for values in live}
    writes = newest_writes(log, newest, wanted, f"a partition live at version {newest}")
    missing = sorted(set(wanted) - set(writes), key=_sort_key)
    if missing:  # live files no commit in the log added: a log rewritten by hand
        raise TableNotFoundError(f"no commit of {log.uri} up to version {newest} wrote partitions {missing}")
    return [_lineage(wanted[key], writes[key]) for key in sorted(wanted, key=_sort_key)]
