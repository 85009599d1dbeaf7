"""Table maintenance: remove the files a killed or refused write left in a table's directories.

A write killed before its commit (or a commit that lost every retry) leaves Parquet files that no
version of the table ever referenced, and S3 multipart uploads cut short leave ``*.parquet#1``
style partial names. A plain ``DeltaTable.vacuum()`` only considers files the log removed, so it
deletes none of them; ``vacuum(full=True)`` lists the table's directories and deletes every file
no retained version references. It skips the partial-upload names (measured with deltalake 1.6.6:
``x.parquet#1`` stays), so :func:`vacuum` removes those itself, with the same age threshold. The
threshold is what keeps this safe beside running writers: files of a write still in flight are
younger than the retention and stay.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, TableNotFoundError
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, normalize_uri

DEFAULT_RETENTION_HOURS = 168.0  # Delta's default delta.deletedFileRetentionDuration
PARTIAL_UPLOAD = re.compile(r"\.parquet#\d+$")
_UNIT_HOURS = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}


@dataclass(frozen=True)
class VacuumResult:
    """What :func:`vacuum` removed, or with ``dry_run`` would remove (paths relative to the table)."""

    uri: str
    files: list[str]
    dry_run: bool
    retention_hours: int | None  # None: the table's own retention (delta.deletedFileRetentionDuration)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "files": list(self.files),
            "dry_run": self.dry_run,
            "retention_hours": self.retention_hours,
        }


def vacuum(
    uri: str,
    *,
    retention_hours: int | None = None,
    dry_run: bool = False,
    force: bool = False,
    storage_options: StorageOptions | None = None,
) -> VacuumResult:
    """Delete every file in the table's directories that no retained version references and that is
    older than the retention: files removed by later commits, and files of writes that never committed.

    :param retention_hours: minimum age of a file to delete; default the table's
        ``delta.deletedFileRetentionDuration`` (7 days unless set).
    :param dry_run: only list the files.
    :param force: accept ``retention_hours`` below the table's retention. Files of a write still
        running may then be deleted before its commit, which then refers to missing files.
    :raises InvalidSpecError: ``retention_hours`` is below the table's retention without ``force``.
    """
    from deltalake.exceptions import DeltaError

    from airflow_provider_dltrain.lake.table import open_table

    uri = normalize_uri(uri)
    if retention_hours is not None and retention_hours < 0:
        raise InvalidSpecError(f"retention_hours must be >= 0, got {retention_hours}")
    if DeltaLog(uri, storage_options).latest_version() is None:
        raise TableNotFoundError(f"no Delta table at {uri}")
    table = open_table(uri, None, storage_options)
    try:
        files = table.vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            enforce_retention_duration=not force,
            full=True,
        )
    except DeltaError as err:
        if "retention" not in str(err).lower():
            raise
        raise InvalidSpecError(
            f"retention of {retention_hours} hour(s) is below the retention of {uri} "
            f"(delta.deletedFileRetentionDuration): {err}. Pass force=True (--force) only when no write "
            "to the table is running."
        ) from err
    hours = float(retention_hours) if retention_hours is not None else table_retention_hours(table)
    partial = _partial_uploads(uri, table, hours, storage_options, delete=not dry_run)
    return VacuumResult(uri, sorted([*files, *partial]), dry_run, retention_hours)


def table_retention_hours(table: Any) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` (``interval 7 days``) in hours."""
    text = (table.metadata().configuration or {}).get("delta.deletedFileRetentionDuration")
    match = re.fullmatch(r"\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*", str(text or ""), re.I)
    if not match:
        return DEFAULT_RETENTION_HOURS
    return int(match.group(1)) * _UNIT_HOURS[match.group(2).lower()]


def _partial_uploads(
    uri: str, table: Any, hours: float, storage_options: StorageOptions | None, *, delete: bool
) -> list[str]:
    """Partial-upload leftovers (``*.parquet#1``) older than ``hours``: deleted unless ``delete`` is False."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri, storage_options)
    live = {u.split("://", 1)[-1][len(root) :].lstrip("/") for u in table.file_uris()}
    cutoff = time.time() - hours * 3600
    found = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        rel = info.path[len(root) :].lstrip("/")
        if info.type != pafs.FileType.File or rel.startswith(("_", ".")) or "/_" in rel or "/." in rel:
            continue  # the log and hidden directories, as vacuum itself skips them
        if not PARTIAL_UPLOAD.search(rel) or rel in live:
            continue
        if info.mtime is not None and info.mtime.timestamp() > cutoff:
            continue
        found.append(rel)
        if delete:
            fs.delete_file(info.path)
    return found
