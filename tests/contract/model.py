"""The contract as an executable model (the oracle): what every date's run must give after any history.

Plain Python written from the documented contract (docs/concepts.md, docs/backfills.md "Unchanged
re-runs" and "Years of history", DESIGN.md "Checking the contract"); it never imports the provider
to decide what is expected. It holds, per table version, the rows of every partition, the schema,
and what the commit was (the provider's write with the facts it recorded, another tool's write, a
compaction, a schema change). What is physically left of the history (commit files, checkpoints,
the history index's commit records, data files) is observed by the harness and handed in with
:meth:`Model.observe`: it decides which answers are still possible, never what they are.

The rules (each named where the harness checks it; docs/guarantees.md lists them):

* R1 cut-off pin: the pin for D is the newest version whose commit changed the rows of a partition
  at or before D (the column's own order: numbers as numbers, dates as dates); compactions never
  move it, another tool's write does. Partitions after D never move it.
* R2 partition pin: the pin of partition D is the newest version whose commit added or removed D's
  files.
* R3 when the commits needed to name a pin are gone (log clean-up, a lost or lagging index), the
  answer is the same pin, a version holding exactly the same selected rows in the pinned version's
  columns (the oldest readable one, docs/backfills.md; a column added since is not compared), or a
  typed refusal (a ``DltrainError``) — never a version with other rows.
* R4 reading a pinned version v with a filter gives exactly v's selected rows with v's columns; when
  v's log or selected files are gone, the same rows and columns (read from a later version) or a
  typed refusal. A fully readable version is never refused.
* R5 unchanged re-run: a re-run of D may skip (start nothing) only when the newest commit that changed
  D's rows is the provider's write of D with the facts the re-run would record, and no later commit
  changed the schema; a skip returns that commit's version. Such a re-run never computes: it skips,
  or, when the facts of that write are lost (log clean-up and no history index), it is refused
  before anything is written — computing would commit the date again with other input versions.
* R6 fingerprints: two reads whose rows differ never get the same content fingerprint (training and
  scoring would skip on data they never saw).
* R7 the backfill report of a run that wrote D says it computed: ``computed`` when no earlier provider
  write of D exists, ``changed`` when one does (either, when the history before the write is partly
  gone), ``unknown`` when the write's own commit record is gone - never ``reproduced``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Row = tuple[int, int, Any]  # id, value, extra (None before the column existed in the file)
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}


def typed(kind: str, text: str) -> Any:
    """A partition value (or a filter's bound) as the column's type orders it."""
    if kind == "int":
        return int(text)
    if kind == "date":
        return dt.date.fromisoformat(text[:10])
    if kind == "timestamp":  # the log's text, or a filter's with a zone offset (UTC)
        return dt.datetime.fromisoformat(text.removesuffix("Z").replace("+00:00", ""))
    return text


@dataclass(frozen=True)
class Version:
    """One commit and the table after it."""

    kind: str  # create | ours | foreign | compact | schema | maintenance
    touched: frozenset[str]  # partitions (log text) whose files it added or removed
    data_change: bool  # False for a compaction: the same rows in other files
    facts: str | None  # the re-run facts the provider's write recorded (JSON), else None
    parts: dict[str, tuple[int, tuple[Row, ...]]]  # partition -> (file generation, sorted rows)
    columns: tuple[str, ...]


@dataclass
class Model:
    """The oracle for one table (see the module's rules)."""

    kind: str  # the partition column's type: string | date | int | timestamp
    versions: list[Version] = field(default_factory=list)
    generation: int = 0
    # observed physical state
    present: set[int] = field(default_factory=set)  # commit files still in _delta_log
    checkpoints: set[int] = field(default_factory=set)
    records: set[int] = field(default_factory=set)  # commit records in the history index
    gone_generations: set[int] = field(default_factory=set)  # files a VACUUM deleted

    # -- what happened ---------------------------------------------------------------------------
    @property
    def latest(self) -> int:
        return len(self.versions) - 1

    def _append(
        self, kind: str, touched: Iterable[str], change: bool, facts: str | None, parts: Any, added: str = ""
    ) -> int:
        columns = self.versions[-1].columns if self.versions else ("p", "id", "value")
        columns = (*columns, added) if added else columns
        self.versions.append(Version(kind, frozenset(touched), change, facts, parts, columns))
        self.present.add(self.latest)
        return self.latest

    def create(self) -> int:
        return self._append("create", (), True, None, {})

    def write(self, text: str, rows: Iterable[Row], *, facts: str | None, append: bool = False) -> int:
        parts = dict(self.versions[-1].parts)
        self.generation += 1
        old = parts[text][1] if append and text in parts else ()
        parts[text] = (self.generation, tuple(sorted((*old, *rows), key=repr)))
        return self._append("ours" if facts is not None else "foreign", [text], True, facts, parts)

    def maintain(self) -> int:
        """A commit that changes neither files nor schema (VACUUM START/END, properties)."""
        return self._append("maintenance", (), False, None, dict(self.versions[-1].parts))

    def compact(self, texts: Iterable[str]) -> int:
        parts = dict(self.versions[-1].parts)
        texts = list(texts)
        for text in texts:
            self.generation += 1
            parts[text] = (self.generation, parts[text][1])
        return self._append("compact", texts, False, None, parts)

    def add_column(self, name: str) -> int:
        return self._append("schema", (), False, None, dict(self.versions[-1].parts), added=name)

    def observe(self, present: set[int], checkpoints: set[int], records: set[int], gone: set[int]) -> None:
        self.present, self.checkpoints, self.records = present, checkpoints, records
        self.gone_generations |= gone

    # -- what is still knowable ------------------------------------------------------------------
    def knowable(self, version: int) -> bool:
        """The commit's actions and metadata can still be read: its commit file or the index's record."""
        return version in self.present or version in self.records

    def all_knowable(self, since: int) -> bool:
        return all(self.knowable(v) for v in range(max(since, 0), self.latest + 1))

    def log_readable(self, version: int) -> bool:
        """Version ``version`` can be loaded: a checkpoint at or before it (or version 0) and every commit after."""
        starts = [c for c in self.checkpoints if c <= version] + [-1]
        return any(all(v in self.present for v in range(c + 1, version + 1)) for c in starts)

    def fully_readable(self, version: int, selects: Callable[[str], bool]) -> bool:
        gens = (g for text, (g, _) in self.versions[version].parts.items() if selects(text))
        return self.log_readable(version) and not any(g in self.gone_generations for g in gens)

    # -- the rules ---------------------------------------------------------------------------------
    def at_or_before(self, bound: str) -> Callable[[str], bool]:
        limit = typed(self.kind, bound)
        return lambda text: typed(self.kind, text) <= limit

    def selects(self, filters: list[tuple[str, str, str]]) -> Callable[[str], bool]:
        """Which partitions a conjunction of partition-column predicates selects (typed order)."""
        tests = [(OPS[op], typed(self.kind, str(value))) for _, op, value in filters]
        return lambda text: all(op(typed(self.kind, text), value) for op, value in tests)

    def cutoff(self, bound: str) -> int | None:
        """R1: the newest version that changed the rows of a partition at or before ``bound``."""
        keep = self.at_or_before(bound)
        for version in range(self.latest, -1, -1):
            v = self.versions[version]
            if v.data_change and any(keep(t) for t in v.touched):
                return version
        return None

    def partition_pin(self, text: str) -> int | None:
        """R2: the newest version that added or removed files of partition ``text``."""
        return next((n for n in range(self.latest, -1, -1) if text in self.versions[n].touched), None)

    def last_data_write(self, text: str) -> int | None:
        """R5: the newest commit that changed the rows of ``text`` (compactions skipped)."""
        for version in range(self.latest, -1, -1):
            v = self.versions[version]
            if v.data_change and text in v.touched:
                return version
        return None

    def rows(
        self, version: int, selects: Callable[[str], bool], columns: tuple[str, ...] | None = None
    ) -> list[tuple[Any, ...]]:
        """R4: the rows ``version`` gives a reader (partition value, id, value[, extra]), sorted; with
        ``columns``, only those (R3 compares the rows a pin stands for in the pinned version's columns)."""
        v = self.versions[version]
        wide = "extra" in (v.columns if columns is None else set(v.columns) & set(columns))
        out = []
        for text, (_, rows) in v.parts.items():
            if selects(text):
                out += [(text, r[0], r[1], *((r[2],) if wide else ())) for r in rows]
        return sorted(out, key=repr)

    def columns(self, version: int) -> tuple[str, ...]:
        return self.versions[version].columns

    def schema_changed_after(self, version: int) -> bool:
        return any(self.versions[n].kind == "schema" for n in range(version + 1, self.latest + 1))

    def may_skip(self, text: str, facts: str) -> int | None:
        """R5: the version a re-run of ``text`` with ``facts`` returns without computing, or None."""
        last = self.last_data_write(text)
        if last is None or self.versions[last].kind != "ours":
            return None
        if json.loads(self.versions[last].facts or "null") != json.loads(facts):
            return None
        return None if self.schema_changed_after(last) else last
