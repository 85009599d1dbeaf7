"""Resolve table versions: newest, as of a time, and whether a version holds a partition."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri


def open_table(uri: str, version: int | None = None, storage_options: StorageOptions | None = None) -> Any:
    """Open a ``deltalake.DeltaTable`` (at ``version`` when given) or raise ``TableNotFoundError``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError as DeltaNotFound

    try:
        return DeltaTable(normalize_uri(uri), version=version, storage_options=storage_options or None)
    except DeltaNotFound as err:
        raise TableNotFoundError(f"no Delta table at {uri}: run the task that creates it first") from err
    except Exception as err:
        if version is not None and "version" in str(err).lower():
            raise TableNotFoundError(f"{uri} has no version {version}: {err}") from err
        raise


def latest(uri: str, storage_options: StorageOptions | None = None) -> DeltaRef:
    """The newest version of the table."""
    log = DeltaLog(uri, storage_options)
    version = log.latest_version()
    if version is None:
        raise TableNotFoundError(f"no Delta table at {uri}: run the task that creates it first")
    return log.ref(version)


def ref_at(uri: str, version: int, storage_options: StorageOptions | None = None) -> DeltaRef:
    """A ``DeltaRef`` for an existing version (commit timestamp filled in)."""
    return DeltaLog(uri, storage_options).ref(version)


def as_of(uri: str, when: datetime, storage_options: StorageOptions | None = None) -> DeltaRef:
    """The version that was current at ``when`` (the newest commit at or before it)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    log = DeltaLog(uri, storage_options)
    newest = log.latest_version()
    if newest is None:
        raise TableNotFoundError(f"no Delta table at {uri}")
    target = when.timestamp() * 1000
    # commit timestamps are monotonic in practice; binary search over the commit files
    low, high = 0, newest
    if (log.commit_info(0).get("timestamp") or 0) > target:
        raise TableNotFoundError(f"{uri} did not exist yet at {when.isoformat()}")
    while low < high:
        mid = (low + high + 1) // 2
        if (log.commit_info(mid).get("timestamp") or 0) <= target:
            low = mid
        else:
            high = mid - 1
    return DeltaRef(log.uri, low, millis_to_iso(log.commit_info(low).get("timestamp")))


def has_partition(
    uri: str, version: int, partition: dict[str, str], storage_options: StorageOptions | None = None
) -> bool:
    """Whether ``version`` of the table has at least one file in ``partition``.

    Cheap at the newest version: the commits since the last checkpoint and that checkpoint's
    partition columns (see :meth:`DeltaLog.has_partition`), whatever the length of the history.
    """
    wanted = [(c, str(v)) for c, v in part.key(partition)]
    present = DeltaLog(uri, storage_options).has_partition(version, wanted)
    if present is None:  # unusual log layout: ask delta-rs
        table = open_table(uri, version, storage_options)
        return bool(table.file_uris(file_pruning_predicate=part.filters(partition)))
    return present


def active_files(
    uri: str, version: int, storage_options: StorageOptions | None = None, filters: Any = None
) -> list[str]:
    """Absolute URIs of the data files of exactly ``version`` (optionally partition-filtered)."""
    return list(open_table(uri, version, storage_options).file_uris(file_pruning_predicate=filters or None))
