"""The landing-zone rules as an oracle: which landed files an input reads, which it refuses and why.

Plain Python written from docs/operators/etl.md ("What the landing zone accepts", "Every file not
read goes to the quarantine table", "Line length"); it never imports the provider. A landing folder
is described as a tree (relative path -> :class:`Entry`), so the oracle decides on the description,
never on the files the harness wrote from it. The rules (docs/guarantees.md, "The landing zone"):

* L1 a pattern (``*``, ``?``, ``[...]``, ``{a,b}``) is matched folder by folder below its anchor (the
  folder above the first pattern component), hidden names included; a linked folder met on the way
  is refused, not entered; overlapping alternatives list a file once.
* L2 below the input's path a symbolic link (to a file or a folder) is refused; a name starting with
  ``.`` or ``_``, or inside such a folder, is refused; a name with ``:``, or else with a glob character
  (``*?[]{}`` and backslash), is refused where Spark's own reader opens the file (``csv``), read for
  ``binaryFile``. Where two rules apply, either reason.
* L3 a file over ``max_file_bytes`` is refused (the rest is read).
* L4 a read ``csv`` file holding a record longer than ``max_line_bytes`` fails the task (a
  ``LandingFileError`` naming the file), before anything is written; a refused file is never measured.
* L5 every landed file of the input is read (its rows in the table) or refused (one quarantine row,
  its reason), exactly once, whatever the transform does; nothing outside the folder is read.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field

HIDDEN = "hidden name (starts with '.' or '_'): not read"
SYMLINK = "symbolic link: not followed (the landing zone takes regular files only)"
HADOOP_NAME = "name holds ':', which Hadoop paths cannot hold: not read (rename the file)"
GLOB_NAME = "name holds a glob character (*?[]{}\\), which Spark's reader expands: not read (rename the file)"
GLOB_CHARS = "*?[{"


def oversized(size: int, limit: int) -> str:
    return f"file is {size} bytes, over max_file_bytes={limit}: not read (raise the input's max_file_bytes)"


@dataclass(frozen=True)
class Entry:
    """A landed entry: ``dir``, ``file`` (its bytes and its records), ``link_file`` or ``link_dir``
    (a symbolic link to a file or a folder outside the landing zone)."""

    kind: str
    data: bytes = b""
    records: tuple[bytes, ...] = ()  # a csv file's records as Spark reads them (header first)
    rows: tuple[int, ...] = ()  # the ``n`` of each data row (csv); an image's row is its length


@dataclass
class Verdict:
    """What an input must give: files read (rel paths), files refused (rel path -> allowed reasons)."""

    read: list[str] = field(default_factory=list)
    refused: dict[str, frozenset[str]] = field(default_factory=dict)


def is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def expand_braces(pattern: str) -> list[str]:
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, cut, options = 0, start + 1, []
    for i in range(start, len(pattern)):
        if pattern[i] == "{":
            depth += 1
        elif pattern[i] == "}":
            depth -= 1
            if depth == 0:
                options.append(pattern[cut:i])
                return [x for o in options for x in expand_braces(pattern[:start] + o + pattern[i + 1 :])]
        elif pattern[i] == "," and depth == 1:
            options.append(pattern[cut:i])
            cut = i + 1
    raise ValueError(f"unbalanced braces in {pattern}")


def anchor_of(pattern: str) -> str:
    parts = pattern.split("/")
    first = next((i for i, p in enumerate(parts) if any(c in p for c in GLOB_CHARS)), len(parts))
    return "/".join(parts[:first])


def children(tree: dict[str, Entry], folder: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[-1] for p in tree if p.rpartition("/")[0] == folder)


def listing(
    tree: dict[str, Entry], pattern: str, glob: str | None, *, spark_reads: bool, max_file_bytes: int | None
) -> Verdict:
    """L1-L3: the files ``pattern`` (relative to the landing root) reads and those it refuses."""
    anchor = anchor_of(pattern)
    verdict = Verdict()
    roots = [pattern] if anchor == pattern else _matches(tree, pattern, anchor, verdict)
    for root in sorted(set(roots)):
        below = root[len(anchor) + 1 :].split("/") if root != anchor else []
        hidden_root = any(is_hidden(p) for p in below)
        if tree[root].kind == "dir":
            for path in sorted(p for p in tree if p.startswith(root + "/") and tree[p].kind != "dir"):
                name = path.rsplit("/", 1)[-1]
                if glob and not fnmatch.fnmatchcase(name, glob):
                    continue
                folders = path[len(root) + 1 :].split("/")[:-1]
                _judge(tree, path, hidden_root or any(map(is_hidden, folders)), spark_reads, verdict)
        elif not glob or fnmatch.fnmatchcase(root.rsplit("/", 1)[-1], glob):
            _judge(tree, root, hidden_root, spark_reads, verdict)
    verdict.read = sorted(set(verdict.read))  # overlapping alternatives match a file once
    for path in list(verdict.read):
        size = len(tree[path].data)
        if max_file_bytes is not None and size > max_file_bytes:
            verdict.read.remove(path)
            verdict.refused[path] = frozenset({oversized(size, max_file_bytes)})
    return verdict


def _matches(tree: dict[str, Entry], pattern: str, anchor: str, verdict: Verdict) -> list[str]:
    """L1: every entry a pattern matches; a linked folder met before its last component is refused."""
    roots: list[str] = []
    for alternative in expand_braces(pattern):
        current = [anchor]
        rest = alternative[len(anchor) + 1 :].split("/")
        for depth, component in enumerate(rest):
            found = []
            for full in (f"{folder}/{name}" for folder in current for name in children(tree, folder)):
                if not fnmatch.fnmatchcase(full.rsplit("/", 1)[-1], component):
                    continue
                if depth == len(rest) - 1 or tree[full].kind == "dir":
                    found.append(full)
                elif tree[full].kind.startswith("link"):
                    verdict.refused[full] = frozenset({SYMLINK})
            current = found
        roots += current
    return roots


def _judge(
    tree: dict[str, Entry], path: str, hidden_folder: bool, spark_reads: bool, verdict: Verdict
) -> None:
    name = path.rsplit("/", 1)[-1]
    reasons = {HIDDEN} if hidden_folder or is_hidden(name) else set()
    if tree[path].kind.startswith("link"):
        reasons.add(SYMLINK)
    if spark_reads and ":" in name:
        reasons.add(HADOOP_NAME)
    elif spark_reads and any(c in name for c in "*?[]{}\\"):
        reasons.add(GLOB_NAME)
    if reasons:
        verdict.refused[path] = frozenset(reasons)
    else:
        verdict.read.append(path)


def too_long(tree: dict[str, Entry], read: Iterable[str], max_line_bytes: int) -> dict[str, int]:
    """L4: read files holding a record over the limit -> the 1-based number of the first such record."""
    out = {}
    for path in read:
        lengths = [len(r) for r in tree[path].records]
        over = [i for i, n in enumerate(lengths, 1) if n > max_line_bytes]
        if over:
            out[path] = over[0]
    return out
