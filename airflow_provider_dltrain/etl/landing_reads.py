"""Reading a checked landing file: never through a link, never more than was checked.

Every landed file is opened below its input's own folder (the *anchor*: the path the DAG names, or
the folder above its first glob) one path component at a time, each with ``O_NOFOLLOW`` through the
descriptor of the folder above it: a folder swapped for a symbolic link after the listing is not
followed, wherever it sits. What Spark's own readers (``csv``, ``json``, ``text``, ``parquet``) get
is a private copy of those bytes (:func:`stage_files`), made while the lines are checked, so the
bytes checked are the bytes read; ``binaryFile`` rows are read by Python workers the same way
(:func:`binary_file_reader`).

A record Spark reads as one is bounded by ``max_line_bytes``: a line (split on the input's
``lineSep`` when it has one) or, for ``csv`` with ``multiLine``, a record whose quoted fields span
lines. Errors name the file, the line and the limit, never a byte of the file or where a link points.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import LandingFileError

_CHUNK = 1 << 20
LINKED = (
    "a folder on its path, or the file itself, is a symbolic link now (it changed after the listing): "
    "not followed; land the files again and re-run"
)
NOT_REGULAR = "not a regular file: not read"
_STAGED: list[str] = []  # this process's private copies, removed at exit at the latest


def open_below(anchor: str, path: str) -> int:
    """A read-only descriptor of the regular file ``path``, opened component by component below
    ``anchor`` (itself resolved as given) with ``O_NOFOLLOW`` on every component.

    :raises LandingFileError: a component is a symbolic link (or no folder), or the file is not regular.
    """
    rel = os.path.relpath(path, anchor)
    parts = rel.split(os.sep)
    if rel in (".", "") or parts[0] == "..":
        raise LandingFileError(f"{path}: not below its input's folder {anchor}: not read")
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    directory = os.open(anchor, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow, dir_fd=directory)
            os.close(directory)
            directory = inner
        fd = os.open(parts[-1], os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0), dir_fd=directory)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise LandingFileError(f"{path}: {LINKED}") from None
        raise
    finally:
        os.close(directory)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LandingFileError(f"{path}: {NOT_REGULAR}")
    return fd


def read_limited(fd: int, path: str, max_file_bytes: int | None) -> Iterator[bytes]:
    """``fd``'s bytes in chunks; a file grown past ``max_file_bytes`` since its listing is refused."""
    total = 0
    while chunk := os.read(fd, _CHUNK):
        total += len(chunk)
        if max_file_bytes is not None and total > max_file_bytes:
            raise LandingFileError(
                f"{path} grew over max_file_bytes={max_file_bytes} bytes after it was listed: not read. "
                "Land the file once, complete, and re-run"
            )
        yield chunk


@dataclass(frozen=True)
class RecordRule:
    """What Spark reads as one record: ``sep``-separated lines, quotes spanning them with ``multiLine``."""

    sep: bytes = b"\n"
    quote: bytes | None = None  # set for csv multiLine: a separator inside quotes joins lines
    escape: bytes | None = None

    @classmethod
    def of(cls, fmt: str, options: Mapping[str, str]) -> RecordRule:
        lowered = {k.lower(): str(v) for k, v in options.items()}
        sep = (lowered.get("linesep") or "\n").encode("utf-8")
        if fmt == "csv" and lowered.get("multiline", "").lower() == "true":
            quote = lowered.get("quote", '"').encode("utf-8") or None
            return cls(sep, quote, lowered.get("escape", "\\").encode("utf-8") or None)
        return cls(sep)


class RecordScanner:
    """Feed a file's chunks; raises at the first record longer than ``limit`` bytes (memory: a chunk)."""

    def __init__(self, path: str, limit: int, rule: RecordRule) -> None:
        self.path, self.limit, self.rule = path, limit, rule
        tokens = [t for t in (rule.sep, rule.quote, rule.escape) if t]
        self.pattern = re.compile(b"|".join(re.escape(t) for t in sorted(set(tokens), key=len, reverse=True)))
        self.keep = max(map(len, tokens)) - 1  # a token split between two chunks is matched whole
        self.carry, self.base, self.start = b"", 0, 0  # unscanned tail, its offset, the record's start
        self.record, self.quoted, self.skip_to = 1, False, 0

    def feed(self, chunk: bytes, eof: bool = False) -> None:
        buf = self.carry + chunk
        end = len(buf) if eof else max(0, len(buf) - self.keep)
        for m in self.pattern.finditer(buf):
            at = self.base + m.start()
            if m.start() >= end:
                break  # maybe the start of a token the next chunk completes: scanned again then
            if at < self.skip_to:
                continue
            token = m.group()
            self.skip_to = self.base + m.end()
            if self.quoted and token == self.rule.escape and token != self.rule.quote:
                self.skip_to += 1  # the escaped character is no token
            elif token == self.rule.quote:
                self.quoted = not self.quoted
            elif token == self.rule.sep and not self.quoted:
                self._ends(at, self.base + m.end())
        self._check(self.base + end - self.start)
        self.carry, self.base = buf[end:], self.base + end

    def _ends(self, at: int, after: int) -> None:
        self._check(at - self.start)
        self.start, self.record = after, self.record + 1

    def _check(self, length: int) -> None:
        if length > self.limit:
            what = "record" if self.rule.quote else "line"
            raise LandingFileError(
                f"{self.path} {what} {self.record} is longer than max_line_bytes={self.limit} bytes (the input's "
                "limit). Fix the file, or raise the input's max_line_bytes; retrying cannot help."
            )


def check_records(path: str, chunks: Iterator[bytes], limit: int, rule: RecordRule) -> Iterator[bytes]:
    """``chunks`` passed through, each fed to a :class:`RecordScanner` first."""
    scanner = RecordScanner(path, limit, rule)
    for chunk in chunks:
        scanner.feed(chunk)
        yield chunk
    scanner.feed(b"", eof=True)


def staging_folder() -> str:
    """A new private (0700) folder for checked copies under ``$DLTRAIN_HOME/landing-staging``."""
    parent = os.path.join(os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain")), "landing-staging")
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(dir=parent)
    if not _STAGED:
        atexit.register(release_staged)
    _STAGED.append(folder)
    return folder


def stage_files(
    anchor: str,
    files: Sequence[str],
    *,
    check: Callable[[str, Iterator[bytes]], Iterator[bytes]] | None = None,
    max_file_bytes: int | None = None,
) -> tuple[str, list[str]]:
    """Copy each checked file (opened with :func:`open_below`) to a private folder, ``check`` run on
    its bytes on the way; returns the folder and the copies, at the same paths below it as below ``anchor``."""
    folder = staging_folder()
    copies = []
    for path in files:
        target = os.path.join(folder, os.path.relpath(path, anchor))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = open_below(anchor, path)
        try:
            chunks = read_limited(fd, path, max_file_bytes)
            with open(target, "wb") as out:
                for chunk in check(path, chunks) if check else chunks:
                    out.write(chunk)
        finally:
            os.close(fd)
        copies.append(target)
    return folder, copies


def release_staged() -> None:
    """Remove this process's checked copies (after the stage's write; at exit at the latest)."""
    while _STAGED:
        shutil.rmtree(_STAGED.pop(), ignore_errors=True)


def binary_file_reader(anchor: str, max_file_bytes: int | None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Executor side of a local ``binaryFile`` input: Spark's binaryFile rows, opened with :func:`open_below`."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
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
                fd = open_below(anchor, path)
                try:
                    st = os.fstat(fd)
                    content = b"".join(read_limited(fd, path, max_file_bytes))
                finally:
                    os.close(fd)
                row = {
                    "path": f"file:{path}",
                    "modificationTime": st.st_mtime_ns // 1000,
                    "length": len(content),
                    "content": content,
                }
                yield pa.RecordBatch.from_pylist([row], schema=schema)

    return read
