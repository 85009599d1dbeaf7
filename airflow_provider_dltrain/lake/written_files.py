"""Parquet files written into a table's directory before their Delta commit, and cleaning up after them.

Spark (or the local writer) writes the files; :mod:`airflow_provider_dltrain.lake.write` commits
them. A commit that does not happen (refused, or the partition is unchanged) deletes the files and
the directories its write created, and nothing else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, is_remote, join, normalize_uri

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file already written inside the table directory by another engine (Spark)."""

    path: str  # relative to the table root
    size: int
    num_records: int
    stats: str  # Delta stats JSON
    modification_time: int  # epoch millis


def delete_files(uri: str, files: Sequence[WrittenFile], storage_options: StorageOptions | None) -> None:
    """Remove files written for a commit that will not happen (an orphan left behind is harmless)."""
    fs, root = filesystem(uri, storage_options)
    for f in files:
        try:
            fs.delete_file(join(root, f.path))
        except (FileNotFoundError, OSError):
            logger.warning("could not remove unreferenced file %s of %s", f.path, uri)


def missing_dirs(uri: str, rel_dir: str) -> list[str]:
    """Local directories a write into ``rel_dir`` of the table would create, deepest first.

    None on object stores, where directories do not exist. Taken before writing, so that a refused
    write removes only the directories it created (:func:`remove_empty_dirs`).
    """
    if is_remote(uri):
        return []
    root = normalize_uri(uri)
    parts = [p for p in rel_dir.split("/") if p]
    paths = [root, *(os.path.join(root, *parts[: i + 1]) for i in range(len(parts)))]
    return [p for p in reversed(paths) if not os.path.exists(p)]


def adds_any(
    uri: str, version: int, files: Sequence[WrittenFile], storage_options: StorageOptions | None
) -> bool:
    """Whether the commit at ``version`` adds any of ``files`` (paths compared percent-decoded)."""
    from urllib.parse import unquote

    paths = {unquote(f.path) for f in files}
    actions = DeltaLog(uri, storage_options).commit_actions(version) if paths else []
    return any(unquote(a["add"]["path"]) in paths for a in actions if a.get("add"))


def remove_empty_dirs(paths: Sequence[str]) -> None:
    """Remove each of ``paths`` (deepest first) that is empty; stop at the first that is not."""
    for path in paths:
        try:
            os.rmdir(path)  # refuses a non-empty directory atomically: a concurrent writer's files stay
        except FileNotFoundError:
            continue
        except OSError:
            break
