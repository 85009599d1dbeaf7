"""What a local landing folder holds that may be read, and what is refused with a reason.

Checked on the driver before Spark opens anything, with ``lstat`` only (no file is opened):

* a symbolic link below the input's path is never followed, wherever it points: refused;
* a name starting with ``.`` or ``_`` (Spark's hidden files), or under such a folder: refused,
  not read, so that it is logged and quarantined instead of vanishing silently;
* anything that is not a regular file (a FIFO would block the reader forever): refused;
* a name Hadoop paths cannot hold (``:``) in an input Spark's own reader opens: refused.
  ``binaryFile`` inputs are read here instead (:func:`read_binary_files`), so such names are read.

The input's own path (the folder or file the DAG names) is resolved as given: its parents are the
deployment's choice. A refused file given as the input's path itself is a
:class:`~airflow_provider_dltrain.exceptions.LandingFileError`, as is a text line longer than
``max_line_bytes`` (:func:`check_line_lengths`): both fail the task without retries, and neither
message holds a byte of the file or where a link points.
"""

from __future__ import annotations

import fnmatch
import glob as globbing
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InputNotFoundError, LandingFileError

MAX_LINE_BYTES = 1 << 20  # 1 MiB: far above any sane CSV/JSON line, far below what kills a JVM
REFUSED_ATTR = "_dltrain_refused"  # the tag read_input puts on a DataFrame: its refused files
_CHUNK = 1 << 20
HIDDEN = "hidden name (starts with '.' or '_'): not read"
SYMLINK = "symbolic link: not followed (the landing zone takes regular files only)"
NOT_REGULAR = "not a regular file: not read"
HADOOP_NAME = "name holds ':', which Hadoop paths cannot hold: not read (rename the file)"


@dataclass(frozen=True)
class RefusedFile:
    """A landed file that is not read, and why (the same words on every run)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Landing:
    """The regular files an input reads (sorted) and those it refuses."""

    files: tuple[str, ...]
    refused: tuple[RefusedFile, ...]


def list_landing(path: str, glob: str | None = None, *, spark_reads: bool = True) -> Landing:
    """The files at or under ``path`` (a file, a folder or a glob) an input may read.

    :param glob: ``pathGlobFilter``: only base names matching it belong to the input at all.
    :param spark_reads: Spark's own reader opens the files, so names with ``:`` are refused too.
    :raises InputNotFoundError: nothing is at ``path`` (retried: the day may land late).
    :raises LandingFileError: ``path`` is itself a file that is refused.
    """
    roots = _glob(path) if _has_glob(path) else [path]
    files: list[str] = []
    refused: list[RefusedFile] = []
    for root in roots:
        if not os.path.lexists(root):
            raise InputNotFoundError(
                f"nothing at {path} (the path does not exist). Has the data for this date landed? "
                "Check the path template, or re-run once it has arrived."
            )
        st = os.lstat(root)
        if stat.S_ISDIR(st.st_mode) or (root == path and os.path.isdir(root)):
            _walk(
                root,
                glob,
                spark_reads,
                files,
                refused,
                hidden=root != path and _is_hidden(os.path.basename(root)),
            )
            continue
        if glob and not fnmatch.fnmatchcase(os.path.basename(root), glob):
            continue
        reason = _refusal(root, st, spark_reads)
        if reason and root == path:
            raise LandingFileError(
                f"{path}: {reason}. Land the file itself under this name; retrying cannot help."
            )
        _keep(root, reason, files, refused)
    return Landing(tuple(sorted(files)), tuple(sorted(refused, key=lambda r: r.path)))


def _glob(path: str) -> list[str]:
    """What a glob in the path matches, hidden names included (Python 3.11+) so they are refused."""
    hidden = {"include_hidden": True} if sys.version_info >= (3, 11) else {}
    return sorted(globbing.glob(path, **hidden))  # type: ignore[arg-type]


def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _walk(
    root: str,
    glob: str | None,
    spark_reads: bool,
    files: list[str],
    refused: list[RefusedFile],
    *,
    hidden: bool = False,
) -> None:
    for directory, dirs, names in os.walk(root, onerror=_raise):
        hidden_dir = hidden or _is_hidden(os.path.relpath(directory, root))
        for name in sorted(names + [d for d in dirs if os.path.islink(os.path.join(directory, d))]):
            if glob and not fnmatch.fnmatchcase(name, glob):
                continue  # another input's file (labels.csv beside the images), not this one's
            full = os.path.join(directory, name)
            reason = HIDDEN if hidden_dir else _refusal(full, os.lstat(full), spark_reads)
            _keep(full, reason, files, refused)


def _raise(err: OSError) -> None:
    raise err


def _is_hidden(relative: str) -> bool:
    """A folder Spark would skip: a component (below the input's path) starting with ``.`` or ``_``."""
    parts = relative.split(os.sep) if relative != "." else []
    return any(p.startswith((".", "_")) for p in parts if p)


def _refusal(path: str, st: os.stat_result, spark_reads: bool) -> str | None:
    name = os.path.basename(path)
    if stat.S_ISLNK(st.st_mode):
        return SYMLINK
    if name.startswith((".", "_")):
        return HIDDEN
    if not stat.S_ISREG(st.st_mode):
        return NOT_REGULAR
    if spark_reads and ":" in name:
        return HADOOP_NAME
    return None


def _keep(path: str, reason: str | None, files: list[str], refused: list[RefusedFile]) -> None:
    if reason:
        refused.append(RefusedFile(path, reason))
    else:
        files.append(path)


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, refusing a symbolic link or anything but a regular file.

    ``O_NOFOLLOW``: a file swapped for a link after it was listed is not followed either.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LandingFileError(f"{path}: {NOT_REGULAR}")
    return fd


def check_line_lengths(path: str, max_line_bytes: int = MAX_LINE_BYTES) -> None:
    """Read ``path`` in 1 MiB chunks and refuse it at its first line over ``max_line_bytes``.

    Memory stays at one chunk whatever the file holds. The error names the input, the file, the
    1-based line number and the limit, never the line's content.
    """
    fd = open_regular(path)
    line, length = 1, 0
    try:
        while chunk := os.read(fd, _CHUNK):
            parts = chunk.split(b"\n")
            if length + len(parts[0]) <= max_line_bytes and max(map(len, parts)) <= max_line_bytes:
                line, length = line + len(parts) - 1, (length if len(parts) == 1 else 0) + len(parts[-1])
                continue
            for i, part in enumerate(parts):
                length += len(part)
                if length > max_line_bytes:
                    raise LandingFileError(
                        f"{path} line {line} is "
                        f"longer than max_line_bytes={max_line_bytes} bytes (the input's limit). Fix the "
                        "file, or raise the input's max_line_bytes; retrying cannot help."
                    )
                if i < len(parts) - 1:
                    line, length = line + 1, 0
    finally:
        os.close(fd)


def read_binary_files(batches: Iterator[Any]) -> Iterator[Any]:
    """Executor side of a local ``binaryFile`` input: Spark's binaryFile rows, links never followed."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("path", pa.string()),
            ("modificationTime", pa.timestamp("us", tz="UTC")),
            ("length", pa.int64()),
            ("content", pa.binary()),
        ]
    )
    for listing in batches:
        for path in listing.column("file").to_pylist():
            fd = open_regular(path)
            try:
                st = os.fstat(fd)
                with os.fdopen(fd, "rb", closefd=False) as handle:
                    content = handle.read()
            finally:
                os.close(fd)
            row = {
                "path": f"file:{path}",
                "modificationTime": st.st_mtime_ns // 1000,
                "length": len(content),
                "content": content,
            }
            yield pa.RecordBatch.from_pylist([row], schema=schema)


def refused_files(df: Any) -> list[RefusedFile]:
    """The files an input read by :func:`~airflow_provider_dltrain.etl.inputs.read_inputs` refused."""
    return list(getattr(df, REFUSED_ATTR, None) or [])
