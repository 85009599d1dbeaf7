"""Which commit last changed a partition: the version a backfill must pin to reproduce a run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions


def _touches(action: Mapping[str, Any], wanted: dict[str, str]) -> bool:
    body = action.get("add") or action.get("remove")
    if not body:
        return False
    values = body.get("partitionValues") or {}
    return all(values.get(col) == val for col, val in wanted.items())


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
    newest = log.latest_version() if at_version is None else at_version
    if newest is None:
        raise TableNotFoundError(f"no Delta table at {uri}")
    for version in range(newest, -1, -1):
        try:
            actions = log.commit_actions(version)
        except TableNotFoundError:
            # older commits were removed by log retention after a checkpoint
            raise TableNotFoundError(
                f"partition {wanted} of {uri} was last written before version {version + 1}, the oldest "
                "commit still in the log (older ones were removed by the table's log retention, "
                "delta.logRetentionDuration). Re-run the ingest of that partition to pin it again, and keep "
                "the log as long as backfills must reproduce history."
            ) from None
        if any(_touches(a, wanted) for a in actions):
            return log.ref(version)
    raise TableNotFoundError(
        f"no commit of {uri} up to version {newest} wrote partition {wanted}; has it been ingested?"
    )
