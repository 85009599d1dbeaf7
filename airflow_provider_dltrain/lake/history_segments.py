"""The history index's partition writes in segments, so that a pin reads what its date needs.

``head.json`` (format 3) keeps the table-wide facts of :mod:`.history_index` and one summary per
segment; a segment file (``segments/<id>-<indexed>.json``, never rewritten) holds the writes of up
to :data:`SEGMENT_PARTITIONS` partitions, in the order they were first written: for a table
partitioned by date, a run of consecutive dates. A summary holds the segment's partition columns,
each column's lowest and highest value (compared in the column's type), its newest version and its
newest write that changed a partition's rows, so that

* the writes of one partition read the segment whose value ranges hold it (two where dates meet);
* a cut-off (the newest change to any partition ``<= D``) reads no segment that lies wholly before
  ``D`` (its summary answers) or wholly after it (it cannot), only the one or two ``D`` falls in;
* a question about every partition (a table's lineage, recovery after log clean-up) reads them all.

The head grows by one summary per ``SEGMENT_PARTITIONS`` partitions (about 80 for 10,000). A
writer writes the segments its commit changed, then the head, then removes the files its segments
replaced a generation before (a reader holding the previous head still finds its files). A segment
file that is gone all the same (a reader two heads behind, an older head put back) makes the index
rebuild its writes from the log and the commit records kept beside it, as for a lost head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_dltrain.lake.filters import compare_partition_value

SEGMENT_PARTITIONS = 128
Key = tuple[tuple[str, Any], ...]
Writes = list[Any]  # the history index's Write tuples of one partition, oldest first
Fetch = Callable[["Segment"], "list[tuple[Key, Writes]] | None"]  # None: the file is gone


@dataclass
class Segment:
    """One segment's summary, as the head keeps it."""

    id: int
    file: str | None = None  # its file name under ``segments/`` (None: not written yet)
    previous: str | None = None  # the file it replaced, removed when it is replaced in turn
    count: int = 0
    top: int = -1  # the newest version of any write in it
    data_top: list[Any] | None = None  # the newest write that added or removed files (not a compaction)
    columns: list[str] | None = None  # the partition columns, when every partition has the same
    ranges: dict[str, list[str] | None] = field(default_factory=dict)  # column -> [lowest, highest]
    types: dict[str, str] | None = None  # the column types the ranges were compared in

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Segment:
        return cls(**data)

    def holds(self, key: Key, types: dict[str, str] | None) -> bool:
        """Whether ``key`` may be in this segment (False only when its ranges prove it is not)."""
        if self.columns is None or self.types != _types_of(self.columns, types):
            return True
        if [c for c, _ in key] != self.columns:
            return False
        for column, value in key:
            span = self.ranges.get(column)
            if span is None or value is None:
                return True
            kind = (types or {})[column]
            if compare_partition_value(value, kind, "<", span[0]) or compare_partition_value(
                value, kind, ">", span[1]
            ):
                return False
        return True

    def relation(self, bound: dict[str, Any], types: dict[str, str] | None) -> str:
        """``"all"``, ``"none"`` or ``"some"`` of its partitions are ``<=`` ``bound`` in every column."""
        if self.columns is None or self.types != _types_of(self.columns, types):
            return "some"
        every = True
        for column, limit in bound.items():
            span = self.ranges.get(column) if column in self.columns else None
            if span is None:
                return "some"
            kind = (types or {})[column]
            if compare_partition_value(span[0], kind, "<=", limit) is False:
                return "none"
            every = every and compare_partition_value(span[1], kind, "<=", limit) is True
        return "all" if every else "some"


def _types_of(columns: list[str], types: dict[str, str] | None) -> dict[str, str] | None:
    chosen = {c: types[c] for c in columns if types and c in types}
    return chosen if len(chosen) == len(columns) else None


def summarise(segment: Segment, items: list[tuple[Key, Writes]], types: dict[str, str] | None) -> None:
    """Set ``segment``'s summary from its partitions' writes."""
    writes = [w for _, ws in items for w in ws]
    segment.count = len(items)
    segment.top = max((w.version for w in writes), default=-1)
    data = [w for w in writes if w.files and not w.rearranged]
    newest = max(data, key=lambda w: w.version, default=None)
    segment.data_top = list(newest[:4]) if newest is not None else None
    shapes = {tuple(c for c, _ in key) for key, _ in items}
    segment.columns = list(shapes.pop()) if len(shapes) == 1 else None
    segment.types = _types_of(segment.columns, types) if segment.columns is not None else None
    segment.ranges = {}
    for column in segment.columns or []:
        kind = (segment.types or {}).get(column)
        segment.ranges[column] = _span([dict(key)[column] for key, _ in items], kind)


def _span(values: list[Any], kind: str | None) -> list[str] | None:
    """``[lowest, highest]`` of ``values`` in type ``kind``; None when any cannot be compared."""
    if kind is None or not values or any(v is None for v in values):
        return None
    low = high = values[0]
    for value in values[1:]:
        below, above = (
            compare_partition_value(value, kind, op, edge) for op, edge in (("<", low), (">", high))
        )
        if below is None or above is None:
            return None
        low, high = (value if below else low), (value if above else high)
    return [low, high]


class SegmentedWrites(dict):  # type: ignore[type-arg]
    """``{partition key: writes}`` that reads a segment when a partition in it is first asked for.

    Asking for one key (``get``, ``in``, ``[]``, ``setdefault``) reads the segments that may hold it;
    iterating or ``len`` reads every segment. ``setdefault`` is how the index adds a write, so it
    marks the key's segment changed (a new key joins the last segment when it is written).
    """

    def __init__(
        self,
        segments: list[Segment],
        fetch: Fetch,
        types: dict[str, str] | None,
        rebuild: Callable[[], dict[Key, Writes]] | None = None,
    ) -> None:
        super().__init__()
        self.segments = {s.id: s for s in segments}
        self.types = types
        self.loaded: set[int] = set()
        self.home: dict[Key, int] = {}
        self.changed: set[int] = set()
        self.reads = 0
        self._fetch, self._rebuild = fetch, rebuild

    def connect(self, fetch: Fetch, rebuild: Callable[[], dict[Key, Writes]]) -> None:
        """Read segments with ``fetch``; when one is gone, replace every write with ``rebuild()``."""
        self._fetch, self._rebuild = fetch, rebuild

    @classmethod
    def of(cls, writes: dict[Key, Writes], types: dict[str, str] | None) -> SegmentedWrites:
        """Writes held in memory (an index built from the log, or a format-2 head), none yet in a segment."""
        out = cls([], lambda _s: [], types)
        dict.update(out, writes)
        return out

    # -- reading segments -------------------------------------------------------------------------
    def _load(self, segment_id: int) -> None:
        if segment_id in self.loaded or segment_id not in self.segments:  # read, or gone in a rebuild
            return
        self.loaded.add(segment_id)
        self.reads += 1
        items = self._fetch(self.segments[segment_id])
        if items is None:
            self._replace_with_rebuild()
            return
        for key, writes in items:
            dict.__setitem__(self, key, writes)
            self.home[key] = segment_id

    def _replace_with_rebuild(self) -> None:
        if self._rebuild is None:
            raise FileNotFoundError("a segment of the history index is gone and nothing can rebuild it")
        rebuilt = self._rebuild()
        dict.clear(self)
        dict.update(self, rebuilt)
        self.segments, self.home, self.changed = {}, {}, set()
        self.loaded = set()

    def load_all(self) -> None:
        for segment_id in list(self.segments):
            if not self.segments:  # a rebuild replaced them all
                return
            self._load(segment_id)

    def _load_for(self, key: Key) -> None:
        if dict.__contains__(self, key):  # a partition lives in one segment: present means complete
            return
        for segment in list(self.segments.values()):
            if segment.id not in self.loaded and segment.holds(key, self.types):
                self._load(segment.id)

    def get(self, key: Any, default: Any = None) -> Any:
        self._load_for(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        self._load_for(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._load_for(key)  # type: ignore[arg-type]
        return dict.__contains__(self, key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._load_for(key)
        if key in self.home:
            self.changed.add(self.home[key])
        return dict.setdefault(self, key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.setdefault(key, value)
        dict.__setitem__(self, key, value)

    def __iter__(self) -> Iterator[Any]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def keys(self) -> Any:
        self.load_all()
        return dict.keys(self)

    def items(self) -> Any:
        self.load_all()
        return dict.items(self)

    def values(self) -> Any:
        self.load_all()
        return dict.values(self)

    # -- the cut-off ------------------------------------------------------------------------------
    def bound_candidates(self, bound: dict[str, Any], upto: int) -> tuple[list[list[Any]], list[Key]]:
        """For the newest change to any partition ``<= bound`` at or before ``upto``: the answers
        summaries give (segments wholly inside, newest change not after ``upto``) and the keys in
        memory to check (after reading the segments ``bound`` cuts through)."""
        answered: list[list[Any]] = []
        cut: list[Segment] = []
        for segment in self.segments.values():
            if segment.id in self.loaded or segment.data_top is None:
                continue
            relation = segment.relation(bound, self.types)
            if relation == "all" and segment.data_top[0] <= upto:
                answered.append(segment.data_top)
            elif relation != "none":
                cut.append(segment)
        best = max((a[0] for a in answered), default=-1)
        for segment in sorted(cut, key=lambda s: -int((s.data_top or [-1])[0])):
            if int((segment.data_top or [-1])[0]) <= best:
                break  # nothing in it is newer than an answer already found
            self._load(segment.id)
        return answered, list(dict.keys(self))

    # -- writing ----------------------------------------------------------------------------------
    def to_write(self) -> list[tuple[Segment, list[tuple[Key, Writes]]]]:
        """The segments to write (changed, or new for keys not in a segment yet), with their writes."""
        if self.segments and any(k not in self.home for k in dict.keys(self)):
            self._load(max(self.segments))  # new keys join it (a rebuild, if its file is gone, empties home)
        pending = [k for k in dict.keys(self) if k not in self.home]
        counts: dict[int, int] = {}
        for segment_id in self.home.values():
            counts[segment_id] = counts.get(segment_id, 0) + 1
        for key in pending:
            last = self.segments[max(self.segments)] if self.segments else None
            if last is None or counts.get(last.id, 0) >= SEGMENT_PARTITIONS:
                last = Segment(max(self.segments, default=-1) + 1)
                self.segments[last.id] = last
                self.loaded.add(last.id)
            self.home[key] = last.id
            counts[last.id] = counts.get(last.id, 0) + 1
            self.changed.add(last.id)
        out = []
        for segment_id in sorted(self.changed):
            items = [(k, dict.__getitem__(self, k)) for k, s in self.home.items() if s == segment_id]
            out.append((self.segments[segment_id], items))
        return out
