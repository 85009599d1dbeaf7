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

import contextlib
import re
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, TableNotFoundError
from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, normalize_uri

DEFAULT_RETENTION_HOURS = 168.0  # Delta's default delta.deletedFileRetentionDuration
PARTIAL_UPLOAD = re.compile(r"\.parquet#\d+$")


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
    older than the retention: files of writes that never committed, and files removed by later
    commits once they are older than the backfill horizon too.

    The two kinds age differently. A file no version ever referenced (a killed write) is needed by
    nobody once it is older than ``retention_hours`` (a write still running is younger). A file a
    commit removed is what an older version reads: it stays for the longer of that retention and
    the backfill horizon (:mod:`.retention`), so a backfill inside the horizon can still read the
    version it pins, whatever the table's ``delta.deletedFileRetentionDuration`` says.

    :param retention_hours: minimum age of a file to delete; default the table's
        ``delta.deletedFileRetentionDuration`` for removed files, and for files of killed writes
        the shorter of that and 7 days (Delta's default).
    :param dry_run: only list the files.
    :param force: accept ``retention_hours`` below the table's retention, and apply it to removed
        files too, inside the horizon. Files of a write still running may then be deleted before its
        commit, which then refers to missing files, and versions inside the horizon lose theirs.
    :raises InvalidSpecError: ``retention_hours`` is below the table's retention without ``force``.
    """
    from airflow_provider_dltrain.lake.retention import horizon_days
    from airflow_provider_dltrain.lake.table import open_table

    uri = normalize_uri(uri)
    if retention_hours is not None and retention_hours < 0:
        raise InvalidSpecError(f"retention_hours must be >= 0, got {retention_hours}")
    if DeltaLog(uri, storage_options).latest_version() is None:
        raise TableNotFoundError(f"no Delta table at {uri}")
    table = open_table(uri, None, storage_options)
    table_hours = table_retention_hours(table)
    if retention_hours is not None and retention_hours < table_hours and not force:
        raise InvalidSpecError(
            f"retention of {retention_hours} hour(s) is below the retention of {uri} "
            f"(delta.deletedFileRetentionDuration, {table_hours:g} hours). Pass force=True (--force) only "
            "when no write to the table is running."
        )
    # killed writes: Delta's 7 days (or the table's, when shorter) covers any write still running
    short = retention_hours if retention_hours is not None else min(table_hours, DEFAULT_RETENTION_HOURS)
    removed_after = short if force else max(short, table_hours, horizon_days() * 24)
    # the checks above replace delta-rs's: its own check would refuse the shorter window for killed writes
    every = set(
        table.vacuum(retention_hours=int(short), dry_run=True, enforce_retention_duration=False, full=True)
    )
    removed_by_commits = set(
        table.vacuum(retention_hours=int(short), dry_run=True, enforce_retention_duration=False)
    )
    removed = table.vacuum(
        retention_hours=int(removed_after), dry_run=dry_run, enforce_retention_duration=False
    )
    never_committed = sorted(every - removed_by_commits)  # in no version of the log: killed writes
    if not dry_run:
        _delete(uri, never_committed, storage_options)
        history_index.update(uri, storage_options)
    files = [*removed, *never_committed]
    partial = _partial_uploads(uri, table, float(short), storage_options, delete=not dry_run)
    return VacuumResult(uri, sorted([*files, *partial]), dry_run, retention_hours)


def _delete(uri: str, paths: list[str], storage_options: StorageOptions | None) -> None:
    """Delete files given relative to the table (or as absolute URIs, as delta-rs may list them)."""
    fs, root = filesystem(uri, storage_options)
    for path in paths:
        target = path.split("://", 1)[-1] if "://" in path else f"{root}/{path.lstrip('/')}"
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(target)


def table_retention_hours(table: Any) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` (``interval 7 days``) in hours."""
    from airflow_provider_dltrain.lake.retention import FILE_RETENTION, interval_hours

    text = (table.metadata().configuration or {}).get(FILE_RETENTION)
    return interval_hours(text, DEFAULT_RETENTION_HOURS)


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
