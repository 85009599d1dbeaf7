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
import itertools
import os
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
    """Feed a file's chunks; raises at the first record longer than ``limit`` bytes (memory: a chunk).

    Lines are measured by splitting each chunk on the separator (in C); quote state, for ``csv``
    with ``multiLine``, by counting quotes per line, character by character only on a line that
    holds the escape character.
    """

    def __init__(self, path: str, limit: int, rule: RecordRule) -> None:
        self.path, self.limit, self.rule = path, limit, rule
        self.keep = len(rule.sep) - 1  # a separator split between two chunks is matched whole
        self.carry, self.length, self.record, self.quoted = b"", 0, 1, False
        self.escaped = False  # a chunk ended on the escape character inside quotes

    def feed(self, chunk: bytes, eof: bool = False) -> None:
        buf = self.carry + chunk
        *done, last = buf.split(self.rule.sep)
        inside = 0  # lines ending a quoted field begun in an earlier chunk, one by one
        while self.quoted and inside < len(done):
            self._record_piece(done[inside], ends=True)
            inside += 1
        if self.rule.quote is None or self._lines_are_records(buf, done[inside:]):
            self._lines(done[inside:])
        else:
            for piece in done[inside:]:
                self._record_piece(piece, ends=True)
        hold = 0 if eof else min(self.keep, len(last))
        self.carry = last[len(last) - hold :]
        if self.rule.quote is None:
            self.length += len(last) - hold
            self._check(self.length)
        else:
            self._record_piece(last[: len(last) - hold], ends=False)

    def _lines_are_records(self, buf: bytes, done: list[bytes]) -> bool:
        """No quote spans a separator here: outside quotes, no escape, an even count on every line."""
        quote, escape = self.rule.quote or b"", self.rule.escape
        if self.quoted or self.escaped or (escape and escape != quote and escape in buf):
            return False
        return not any(map((1).__and__, map(bytes.count, done, itertools.repeat(quote))))

    def _lines(self, done: list[bytes]) -> None:
        if not done:
            return
        self._check(self.length + len(done[0]))
        lengths = list(map(len, done[1:]))
        if lengths and max(lengths) > self.limit:
            self.record += 1 + next(i for i, n in enumerate(lengths) if n > self.limit)
            self._check(self.limit + 1)
        self.record += len(done)
        self.length = 0

    def _record_piece(self, piece: bytes, *, ends: bool) -> None:
        """A piece of a record up to a separator (``ends``) or the chunk's end; quotes may join lines."""
        self.length += len(piece)
        self._toggle_quotes(piece, ends)
        self._check(self.length)
        if ends and not self.quoted:
            self.record, self.length = self.record + 1, 0
        elif ends:
            self.length += len(self.rule.sep)  # a separator inside quotes is part of the record

    def _toggle_quotes(self, piece: bytes, ends: bool) -> None:
        quote, escape = self.rule.quote or b"", self.rule.escape
        if self.escaped and piece:
            piece, self.escaped = piece[1:], False  # escaped in the chunk before: no quote
        if not escape or escape == quote or escape not in piece:
            if piece.count(quote) % 2:
                self.quoted = not self.quoted
            return
        at = 0
        while True:  # only lines holding the escape character come here
            q, e = piece.find(quote, at), piece.find(escape, at) if self.quoted else -1
            if e >= 0 and (q < 0 or e < q):
                at = e + len(escape) + 1  # the escaped character is no quote
                self.escaped = at > len(piece) and not ends  # it is the next chunk's first
                continue
            if q < 0:
                return
            self.quoted, at = not self.quoted, q + len(quote)

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
