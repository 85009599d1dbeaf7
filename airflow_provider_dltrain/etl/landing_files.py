"""What a local landing folder holds that may be read, and what is refused with a reason.

Checked on the driver before Spark opens anything, with ``lstat`` only (no file is opened):

* a symbolic link below the input's path is never followed, wherever it points: refused;
* a name starting with ``.`` or ``_`` (Spark's hidden files), or under such a folder: refused,
  not read, so that it is quarantined instead of vanishing silently;
* anything that is not a regular file (a FIFO would block the reader forever): refused;
* a name Hadoop paths cannot hold (``:``) in an input Spark's own reader opens: refused.
  ``binaryFile`` inputs are read here instead, so such names are read;
* a file over the input's ``max_file_bytes``: refused, the rest of the day is read.

A glob (``*``, ``?``, ``[...]``) and Hadoop's ``{a,b}`` alternatives are expanded here, by walking the
folders with ``os.scandir`` (hidden names included on every Python version, linked folders never
entered), and each match is checked like any path: Spark is only ever handed the checked files
(:mod:`~airflow_provider_dltrain.etl.landing_reads` reads them without following a link).

The input's own path (the folder or file the DAG names; for a glob, the folder above its first
pattern: the *anchor*) is resolved as given: its parents are the deployment's choice. A refused
file given as the input's path itself is a :class:`~airflow_provider_dltrain.exceptions.LandingFileError`,
as is a record longer than ``max_line_bytes``: both fail the task without retries, and neither
message holds a byte of the file or where a link points.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.etl.landing_reads import RecordRule, check_records, open_below, read_limited
from airflow_provider_dltrain.exceptions import InputNotFoundError, InvalidSpecError, LandingFileError

MAX_LINE_BYTES = 1 << 20  # 1 MiB: far above any sane CSV/JSON line, far below what kills a JVM
# 256 MiB: a file read as one record (a binaryFile row, multiLine JSON, wholetext) is held by the
# Python worker, its Arrow batch and the JVM at once: three copies stay under Spark's default 1 GiB.
MAX_FILE_BYTES = 256 << 20
MAX_ALTERNATIVES = 1024
REFUSED_ATTR = "_dltrain_refused"  # the tag read_input puts on a DataFrame: its refused files
GLOB_CHARS = "*?[{"
HIDDEN = "hidden name (starts with '.' or '_'): not read"
SYMLINK = "symbolic link: not followed (the landing zone takes regular files only)"
NOT_REGULAR = "not a regular file: not read"
HADOOP_NAME = "name holds ':', which Hadoop paths cannot hold: not read (rename the file)"
# Spark's own readers take every path as a Hadoop glob, and some (multiLine CSV and JSON) expand it a
# second time after the escaped name was matched: a name holding a glob character is not opened by name
SPARK_GLOB_CHARS = "*?[]{}\\"
GLOB_NAME = "name holds a glob character (*?[]{}\\), which Spark's reader expands: not read (rename the file)"


def oversized(size: int, limit: int) -> str:
    """The reason a file over ``max_file_bytes`` is not read (the same words on every run)."""
    return f"file is {size} bytes, over max_file_bytes={limit}: not read (raise the input's max_file_bytes)"


@dataclass(frozen=True)
class RefusedFile:
    """A landed file that is not read, and why (the same words on every run)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Landing:
    """The regular files an input reads (sorted), those it refuses, and the folder both lie below."""

    files: tuple[str, ...]
    refused: tuple[RefusedFile, ...]
    anchor: str = ""


def list_landing(
    path: str, glob: str | None = None, *, spark_reads: bool = True, max_file_bytes: int | None = None
) -> Landing:
    """The files at or under ``path`` (a file, a folder, a glob, ``{a,b}`` alternatives) an input may read.

    :param glob: ``pathGlobFilter``: only base names matching it belong to the input at all.
    :param spark_reads: Spark's own reader opens the files, so names with ``:`` are refused too.
    :param max_file_bytes: a larger file is refused (quarantined), not read.
    :raises InputNotFoundError: nothing is at ``path`` (retried: the day may land late).
    :raises LandingFileError: ``path`` is itself a file that is refused.
    :raises InvalidSpecError: unbalanced or too many ``{a,b}`` alternatives.
    """
    anchor = anchor_of(path)
    files: list[str] = []
    refused: list[RefusedFile] = []
    roots = _expand(path, anchor, refused) if has_glob(path) else [path]
    for root in roots:
        if not os.path.lexists(root):
            raise InputNotFoundError(
                f"nothing at {path} (the path does not exist). Has the data for this date landed? "
                "Check the path template, or re-run once it has arrived."
            )
        st = os.lstat(root)
        hidden = root != path and _is_hidden(os.path.relpath(root, anchor))
        if stat.S_ISDIR(st.st_mode) or (root == path and os.path.isdir(root)):
            _walk(root, glob, spark_reads, files, refused, hidden=hidden)
            continue
        if glob and not fnmatch.fnmatchcase(os.path.basename(root), glob):
            continue
        reason = HIDDEN if hidden else _refusal(root, st, spark_reads)
        if reason and root == path:
            raise LandingFileError(
                f"{path}: {reason}. Land the file itself under this name; retrying cannot help."
            )
        _keep(root, reason, files, refused)
    if max_file_bytes is not None:
        _refuse_oversized(files, refused, max_file_bytes)
    unique = {r.path: r for r in refused}  # overlapping alternatives list a file once
    return Landing(tuple(sorted(set(files))), tuple(sorted(unique.values(), key=lambda r: r.path)), anchor)


def anchor_of(path: str) -> str:
    """The folder the input's files lie below: the path itself, its folder, or the one above its first glob."""
    if has_glob(path):
        parts = path.split("/")
        first = next(i for i, part in enumerate(parts) if has_glob(part))
        return "/".join(parts[:first]) or "/"
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def glob_matches(path: str) -> list[str]:
    """Every path a pattern matches, hidden names and linked folders included (what a listing counts)."""
    refused: list[RefusedFile] = []
    return sorted({*_expand(path, anchor_of(path), refused), *(r.path for r in refused)})


def has_glob(path: str) -> bool:
    return any(c in path for c in GLOB_CHARS)


def expand_braces(path: str) -> list[str]:
    """Hadoop's ``{a,b}`` alternatives (nested too) spelled out: ``x/{a,b}/*.csv`` -> ``x/a/*.csv``, ``x/b/*.csv``."""
    out: list[str] = []
    pending = [path]
    while pending:
        current = pending.pop()
        start = current.find("{")
        if start < 0:
            if "}" in current:
                raise InvalidSpecError(
                    f"{path}: a '}}' with no '{{' before it; write {{a,b}} alternatives whole"
                )
            out.append(current)
        else:
            end, options = _alternatives(path, current, start)
            pending.extend(current[:start] + o + current[end + 1 :] for o in reversed(options))
        if len(out) + len(pending) > MAX_ALTERNATIVES:
            raise InvalidSpecError(f"{path}: more than {MAX_ALTERNATIVES} {{a,b}} alternatives; use fewer")
    return out


def _alternatives(path: str, text: str, start: int) -> tuple[int, list[str]]:
    """The end of the ``{...}`` opening at ``start`` and its top-level, comma-separated options."""
    depth, cut, options = 0, start + 1, list[str]()
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i, [*options, text[cut:i]]
        elif text[i] == "," and depth == 1:
            options.append(text[cut:i])
            cut = i + 1
    raise InvalidSpecError(f"{path}: a '{{' with no '}}' after it; write {{a,b}} alternatives whole")


def _expand(path: str, anchor: str, refused: list[RefusedFile]) -> list[str]:
    """Every path the pattern matches, walked below ``anchor`` with ``os.scandir`` (hidden names too)."""
    matched: list[str] = []
    for alternative in expand_braces(path):
        rest = os.path.relpath(alternative, anchor).split(os.sep) if alternative != anchor else []
        current = [anchor]
        for depth, pattern in enumerate(rest):
            last = depth == len(rest) - 1
            current = [m for folder in current for m in _match(folder, pattern, last, refused)]
        matched += current
    return sorted(set(matched))


def _match(folder: str, pattern: str, last: bool, refused: list[RefusedFile]) -> Iterator[str]:
    """Entries of ``folder`` matching ``pattern``; a linked folder on the way is refused, not entered."""
    if any(c in pattern for c in "*?["):
        try:
            names = sorted(e.name for e in os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    else:
        names = [pattern] if os.path.lexists(os.path.join(folder, pattern)) else []
    for name in names:
        full = os.path.join(folder, name)
        if last:
            yield full
        elif os.path.islink(full):
            refused.append(RefusedFile(full, SYMLINK))
        elif os.path.isdir(full):
            yield full


def _refuse_oversized(files: list[str], refused: list[RefusedFile], limit: int) -> None:
    for path in list(files):
        size = os.lstat(path).st_size
        if size > limit:
            files.remove(path)
            refused.append(RefusedFile(path, oversized(size, limit)))


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
    if spark_reads and any(c in name for c in SPARK_GLOB_CHARS):
        return GLOB_NAME
    return None


def _keep(path: str, reason: str | None, files: list[str], refused: list[RefusedFile]) -> None:
    if reason:
        refused.append(RefusedFile(path, reason))
    else:
        files.append(path)


def checks_lines(fmt: str, options: Mapping[str, str]) -> bool:
    """Spark splits these into lines: a one-record JSON file or a whole-text read is one record."""
    lowered = {k.lower(): str(v).lower() for k, v in options.items()}
    if fmt == "json":
        return lowered.get("multiline") != "true"
    return fmt == "csv" or (fmt == "text" and lowered.get("wholetext") != "true")


def max_line_bytes_of(spec: Mapping[str, Any]) -> int:
    """The input's ``max_line_bytes`` (default 1 MiB), or :class:`InvalidSpecError`."""
    value = spec.get("max_line_bytes", MAX_LINE_BYTES)
    try:
        limit = int(value)
    except (TypeError, ValueError):
        limit = 0
    if limit <= 0 or isinstance(value, bool):
        raise InvalidSpecError(f"max_line_bytes must be a positive number of bytes, got {value!r:.100}")
    return limit


def max_file_bytes_of(spec: Mapping[str, Any], fmt: str, options: Mapping[str, str]) -> int | None:
    """The input's ``max_file_bytes``; by default a limit only where Spark reads a file as one record."""
    value = spec.get("max_file_bytes")
    if value is None:
        lowered = {k.lower(): str(v).lower() for k, v in options.items()}
        whole = fmt == "binaryFile" or lowered.get("multiline" if fmt == "json" else "wholetext") == "true"
        return MAX_FILE_BYTES if whole and fmt in ("binaryFile", "json", "text") else None
    limit = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if isinstance(value, str) and value.strip().isdigit():
        limit = int(value)
    if limit <= 0:
        raise InvalidSpecError(f"max_file_bytes must be a positive number of bytes, got {value!r:.100}")
    return limit


def check_line_lengths(
    path: str, max_line_bytes: int = MAX_LINE_BYTES, rule: RecordRule | None = None, anchor: str | None = None
) -> None:
    """Read ``path`` (never through a link) and refuse it at its first record over ``max_line_bytes``.

    Memory stays at one chunk whatever the file holds. The error names the file, the 1-based line
    (or record) number and the limit, never the content.
    """
    fd = open_below(anchor or os.path.dirname(path) or ".", path)
    try:
        for _ in check_records(path, read_limited(fd, path, None), max_line_bytes, rule or RecordRule()):
            pass
    finally:
        os.close(fd)


def refused_files(df: Any) -> list[RefusedFile]:
    """The files an input read by :func:`~airflow_provider_dltrain.etl.inputs.read_inputs` refused."""
    return list(getattr(df, REFUSED_ATTR, None) or [])
