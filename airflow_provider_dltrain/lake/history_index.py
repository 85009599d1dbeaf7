"""A table's write history kept beside its log, so that a pin costs the same in year two as on day two.

The Delta log answers "which commit last wrote partition P?" only by reading commit files back one
by one from the newest, and forgets the answer once log retention removes old commit files
(``delta.logRetentionDuration``, after each checkpoint). The provider keeps two kinds of file in the
table's ``_dltrain_history`` folder (a name starting with ``_``: Delta readers, writers and VACUUM
leave it alone, and other tools see a plain Delta table):

* ``head.json`` and its segments: for every partition, the versions that touched it (added or
  removed its files, or recorded that they replaced it), each with its commit time and recorded
  content digest; the versions that changed the table's metadata; and ``indexed``, the version up to
  which every commit is in it. The partitions' writes are kept in segments of consecutive
  partitions that the head summarises (:mod:`.history_segments`), so a partition's last write and
  the cut-off pin of a date read the head and one or two segments, whatever the length of the
  history; the digests of every partition a run reads cost one segment per 128 partitions.
* ``commits/<version>.json``: one immutable copy per commit of its ``commitInfo`` (the recorded
  facts, lineage and pairing keys) and the rows it added per partition. Written right after the
  commit, they outlive the commit files the log's retention removes.

``head.json`` is a cache with a high-water mark, never the truth: a reader reads it and then the
commits after ``indexed`` from the log, so a head that lags (another tool's writes, a lost update of
two racing writers, an older release) costs a few more reads and is never wrong. Commits whose files
are gone before they were indexed (a table that had log retention before it was indexed) are
summarised from the oldest readable version's snapshot: every partition live there gets an
``inferred`` write at that version, which is then the oldest version known to hold its content.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import state
from airflow_provider_dltrain.lake.history_segments import Segment, SegmentedWrites, summarise
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.partition import META_DIGEST, META_PARTITION
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, is_remote, join

logger = logging.getLogger(__name__)

INDEX_DIR = "_dltrain_history"
FORMAT = 3  # 2: every partition's writes inline in head.json (still read; written as 3 next time)
Key = tuple[tuple[str, Any], ...]

# flags of one write
FILES = 1  # it added or removed files of the partition
RECORDED = 2  # its commitInfo says it replaced exactly this partition (every write of this provider)
INFERRED = 4  # not a commit seen: the oldest readable version, standing in for writes whose log is gone
REARRANGED = 8  # only rearranged its files (dataChange false: OPTIMIZE, Z-order): same rows as before
# the comparisons HistoryIndex.candidates answers by bisecting a column's sorted texts
_ORDERED = ("=", "==", "<", "<=", ">", ">=")


def key_of(values: Mapping[str, Any]) -> Key:
    return tuple(sorted(values.items()))


def _canonical(key: Key) -> str:
    return json.dumps({str(k): v for k, v in key}, sort_keys=True, separators=(",", ":"))


class Write(NamedTuple):
    """One commit that touched a partition (a tuple: a year of them loads in a millisecond)."""

    version: int
    timestamp: int | None  # commit time, epoch milliseconds
    digest: str | None  # the content digest it recorded for the partition (RECORDED writes only)
    flags: int
    who: Mapping[str, Any] | None = None  # its ``airflow.*`` lineage keys (RECORDED writes only)

    @property
    def files(self) -> bool:
        return bool(self.flags & FILES)

    @property
    def recorded(self) -> bool:
        return bool(self.flags & RECORDED)

    @property
    def inferred(self) -> bool:
        return bool(self.flags & INFERRED)

    @property
    def rearranged(self) -> bool:
        return bool(self.flags & REARRANGED)

    @property
    def content_known(self) -> bool:
        """Its digest names the partition's rows: a write of this provider, or a compaction of one."""
        return bool(self.flags & (RECORDED | REARRANGED)) and not self.inferred

    def ref(self, uri: str) -> DeltaRef:
        return DeltaRef(uri, self.version, millis_to_iso(self.timestamp))

    def to_json(self) -> list[Any]:
        head = [self.version, self.timestamp, self.digest, self.flags]
        return [*head, dict(self.who)] if self.who else head

    @classmethod
    def from_json(cls, data: list[Any]) -> Write:
        return cls(*data) if len(data) == 5 else cls(data[0], data[1], data[2], data[3])


@dataclass
class Stats:
    """Storage requests an index load made (for the benchmarks and the request-bound test)."""

    reads: int = 0
    caught_up: int = 0  # commits read from the log or commit records after ``indexed``


@dataclass
class HistoryIndex:
    """The partition writes of one table up to ``indexed`` (see the module)."""

    uri: str
    indexed: int = -1
    floor: int = 0  # versions below it are unknown (their log was gone when indexed)
    writes: dict[Key, list[Write]] = field(default_factory=dict)
    metadata_versions: list[int] = field(default_factory=list)
    schema: str | None = None  # hash of the newest schema and partitioning seen
    configuration: dict[str, str] = field(default_factory=dict)  # the table's newest properties
    partition_types: dict[str, str] | None = None  # partition column -> Delta type, when known
    stats: Stats = field(default_factory=Stats)
    _log: DeltaLog | None = None
    _records: dict[int, dict[str, Any]] = field(default_factory=dict)
    # built on first use, forgotten when a write is added: partitions by their text in one column
    _by_text: dict[str, dict[Any, list[Key]]] = field(default_factory=dict, repr=False, compare=False)
    _texts: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    _uniform: dict[tuple[str, ...], bool] = field(default_factory=dict, repr=False, compare=False)
    _running: dict[tuple[str, int, int], tuple[list[str], list[Write | None]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    # -- queries --------------------------------------------------------------------------------
    def candidates(self, dnf: Any, columns: tuple[str, ...]) -> tuple[list[Key], bool] | None:
        """The partitions a normalised filter ``dnf`` on string partition columns may select, and
        whether they are exactly those it selects; None when a partition's columns are not
        ``columns`` or one is null (the index cannot decide then).

        When every conjunction compares one of ``columns`` with a text (``=``, ``<``, ``<=``, ``>``,
        ``>=``: string order), only the partitions whose text the comparison admits, found by bisecting
        the column's sorted texts (built once per index: a plan of a year asks this for each date)
        instead of testing every partition; exact when each conjunction is that comparison alone.
        Otherwise every partition, to be filtered by the caller."""
        if columns not in self._uniform:
            wanted = set(columns)
            self._uniform[columns] = all(
                {c for c, _ in key} == wanted and all(v is not None for _, v in key) for key in self.writes
            )
        if not self._uniform[columns]:
            return None
        chosen: dict[Key, None] = {}
        exact = bool(dnf)
        for conj in dnf or ((),):
            terms = [
                (c, op, v) for c, op, v in conj if op in _ORDERED and isinstance(v, str) and c in columns
            ]
            if not terms:
                return list(self.writes), False
            chosen.update(dict.fromkeys(self.keys_where(*terms[0])))
            exact = exact and len(conj) == 1
        return list(chosen), exact

    def keys_where(self, column: str, op: str, text: str) -> list[Key]:
        """The partitions whose text in ``column`` compares ``op`` with ``text`` in string order."""
        by_text = self._by_text.get(column)
        if by_text is None:
            by_text = {}
            for key in self.writes:
                by_text.setdefault(dict(key).get(column), []).append(key)
            self._by_text[column] = by_text
            self._texts[column] = sorted(t for t in by_text if isinstance(t, str))
        texts = self._texts[column]
        if op in ("=", "=="):
            chosen = [text] if text in by_text else []
        elif op == "<=":
            chosen = texts[: bisect.bisect_right(texts, text)]
        elif op == "<":
            chosen = texts[: bisect.bisect_left(texts, text)]
        elif op == ">=":
            chosen = texts[bisect.bisect_left(texts, text) :]
        else:  # ">"
            chosen = texts[bisect.bisect_right(texts, text) :]
        return [key for t in chosen for key in by_text[t]]

    def last_write(self, key: Key, at_version: int | None = None, *, recorded: bool = False) -> Write | None:
        """The newest write of ``key`` at or before ``at_version`` (only RECORDED ones with ``recorded``)."""
        found = self.writes.get(key) or []
        upto = self.indexed if at_version is None else at_version
        i = bisect.bisect_right([w.version for w in found], upto)
        for write in reversed(found[:i]):
            if not recorded or write.recorded:
                return write
        return None

    def last_data_write(
        self, key: Key, at_version: int | None = None, *, files: bool = False
    ) -> Write | None:
        """The newest write of ``key`` that changed its rows (compactions after it skipped); with
        ``files``, only writes that added or removed files (not a write that recorded an empty partition)."""
        upto = self.indexed if at_version is None else at_version
        for write in reversed(self.writes.get(key) or []):
            if write.version <= upto and not write.rearranged and (write.files or not files):
                return write
        return None

    def recorded_writes(self, key: Key, at_version: int | None = None) -> list[Write]:
        """RECORDED writes of ``key`` at or before ``at_version``, newest first."""
        upto = self.indexed if at_version is None else at_version
        return [w for w in reversed(self.writes.get(key) or []) if w.version <= upto and w.recorded]

    def newest_touching(
        self,
        matches: Callable[[dict[str, Any]], bool],
        at_version: int | None,
        bound: Mapping[str, Any] | None = None,
    ) -> Write | None:
        """The newest write at or before ``at_version`` that changed the rows of a partition ``matches``
        accepts (compactions, which only rearrange files, are skipped: the rows are those of the write
        before them, which stays readable for the backfill horizon).

        With ``bound`` (``matches`` is "``<= bound`` in every column"), the segments' summaries
        answer for the partitions wholly inside it and only the segments it cuts through are read
        (:mod:`.history_segments`); the answer from a summary carries no lineage keys (``who``).
        """
        best: Write | None = None
        keys: Iterable[Key] = self.writes
        through = self._one_text(bound, at_version)
        if bound is not None and isinstance(self.writes, SegmentedWrites):
            upto = self.indexed if at_version is None else at_version
            answered, keys = self.writes.bound_candidates(dict(bound), upto)
            best = max((Write.from_json(a) for a in answered), key=lambda w: w.version, default=None)
        elif through is not None:
            keys = list(self.writes)
        elif bound:  # only the partitions at or before the bound in a string column (string order)
            column, text = next(iter(bound.items()))
            if (self.partition_types or {}).get(column) == "string" and isinstance(text, str):
                keys = self.keys_where(column, "<=", text)
        if through is not None:
            found = self._newest_through(list(keys), *through)
            return found if found is not None and (best is None or found.version > best.version) else best
        for key in keys:
            if not matches(dict(key)):
                continue
            write = self.last_data_write(key, at_version, files=True)
            if write is not None and (best is None or write.version > best.version):
                best = write
        return best

    def _one_text(self, bound: Mapping[str, Any] | None, at_version: int | None) -> tuple[str, str] | None:
        """``(column, text)`` when ``bound`` is one string column's text and the question is about the
        newest version: then :meth:`_newest_through` answers."""
        if not bound or len(bound) != 1 or (at_version is not None and at_version < self.indexed):
            return None
        column, text = next(iter(bound.items()))
        if (self.partition_types or {}).get(column) != "string" or not isinstance(text, str):
            return None
        return column, text

    def _newest_through(self, keys: list[Key], column: str, text: str) -> Write | None:
        """The newest write that changed the rows of one of ``keys`` whose ``column`` is ``<= text``
        (string order), at the newest version: a running maximum over those partitions in text order,
        built once per state of the index (and of the partitions read into memory), so a plan that asks
        it for every date of a year reads each partition's writes once, not once per date. Where
        versions tie (one commit wrote several partitions) the first in text order is given: the same
        version, time and provenance as any other of them."""
        state = (column, self.indexed, len(keys))
        if state not in self._running:
            by_text: dict[str, list[Key]] = {}
            for key in keys:
                value = dict(key).get(column)
                if isinstance(value, str):
                    by_text.setdefault(value, []).append(key)
            texts = sorted(by_text)
            running: list[Write | None] = []
            best: Write | None = None
            for each in texts:
                for key in by_text[each]:
                    write = self.last_data_write(key, None, files=True)
                    if write is not None and (best is None or write.version > best.version):
                        best = write
                running.append(best)
            self._running[state] = (texts, running)
        texts, running = self._running[state]
        at = bisect.bisect_right(texts, text)
        return running[at - 1] if at else None

    def touched_between(self, after: int, upto: int, *, rearranged: bool = False) -> list[Key]:
        """Partitions whose rows some commit in ``(after, upto]`` changed (with ``rearranged``, also
        those a compaction only rewrote into other files)."""
        return [
            key
            for key, writes in self.writes.items()
            if any(
                after < w.version <= upto and (w.files or w.inferred) and (rearranged or not w.rearranged)
                for w in writes
            )
        ]

    def metadata_changed(self, after: int, upto: int | None = None) -> bool:
        last = self.indexed if upto is None else upto
        return any(after < v <= last for v in self.metadata_versions)

    def live_at(self, version: int) -> list[Key]:
        """Partitions holding rows at ``version``: written by then and not last emptied (a write of
        another tool counts as leaving rows)."""
        out = []
        for key in self.writes:
            write = self.last_data_write(key, version)
            if write is not None and (write.digest is not None or not write.content_known):
                out.append(key)
        return out

    def added_partitions(self, version: int) -> list[dict[str, Any]]:
        """Partition values of the files commit ``version`` added (empty when its record is gone)."""
        record = self.record(version) or {}
        return [dict(p["values"]) for p in record.get("partitions") or [] if p.get("added", True)]

    # -- commit records -------------------------------------------------------------------------
    def record(self, version: int) -> dict[str, Any] | None:
        """``{"version", "timestamp", "info", "rows"}`` of a commit: its record, else its log file."""
        if version in self._records:
            return self._records[version]
        log = self._require_log()
        self.stats.reads += 1
        try:
            record: dict[str, Any] | None = _record_of(version, log.commit_actions(version))
        except TableNotFoundError:  # removed by log retention: the copy kept beside the log
            text = _read(log, _record_path(version))
            self.stats.reads += 1
            record = json.loads(text) if text else None
        if record is not None:
            self._records[version] = record
        return record

    def info(self, version: int) -> dict[str, Any]:
        record = self.record(version)
        return dict(record["info"]) if record else {}

    def _require_log(self) -> DeltaLog:
        if self._log is None:
            raise RuntimeError("HistoryIndex built without a log")
        return self._log

    # -- building -------------------------------------------------------------------------------
    def _add(self, key: Key, write: Write) -> None:
        self._by_text.clear()
        self._texts.clear()
        self._uniform.clear()
        self._running.clear()
        writes = self.writes.setdefault(key, [])
        if writes and writes[-1].version >= write.version:
            writes[:] = [w for w in writes if w.version != write.version]
            writes.append(write)
            writes.sort(key=lambda w: w.version)
        else:
            writes.append(write)

    def _apply(self, record: Mapping[str, Any], actions_metadata: bool) -> None:
        version = int(record["version"])
        info = record.get("info") or {}
        timestamp = record.get("timestamp")
        claimed = info.get(META_PARTITION)
        keys: dict[Key, int] = {
            key_of(p["values"]): FILES if p.get("change", True) else FILES | REARRANGED
            for p in record.get("partitions") or []
        }
        if claimed:
            try:
                claimed_key = key_of(json.loads(claimed))
            except (ValueError, AttributeError):
                claimed_key = None
            if claimed_key is not None:
                keys[claimed_key] = keys.get(claimed_key, 0) | RECORDED
        who = {k: v for k, v in info.items() if k.startswith("airflow.")} or None
        for key, flags in keys.items():
            recorded = bool(flags & RECORDED)
            if flags & REARRANGED and not recorded:
                same = self.last_write(key, version)
                if same is not None and same.version == version and same.inferred:
                    # a rebuild inferred the write at the oldest kept commit, which only rearranges
                    # files: what was written there is lost, and stays lost (not a known compaction)
                    continue
                # the same rows in other files: the digest and writer of the rows carry over
                before = self.last_write(key, version - 1)
                known = before is not None and before.content_known
                digest = before.digest if known and before is not None else None
                carried = before.who if known and before is not None else None
                self._add(key, Write(version, timestamp, digest, flags, carried))
                continue
            flags &= ~REARRANGED
            digest = info.get(META_DIGEST) if recorded else None
            self._add(key, Write(version, timestamp, digest, flags, who if recorded else None))
        if record.get("configuration") is not None:
            self.configuration = dict(record["configuration"])
        if record.get("partition_types") is not None:
            self.partition_types = dict(record["partition_types"])
        shape = record.get("shape")
        if actions_metadata and (shape is None or shape != self.schema):
            # a property change (retention, say) keeps the schema and partitioning: not a change of shape
            self.metadata_versions.append(version)
            self.schema = shape
        self.indexed = max(self.indexed, version)

    def to_json(self) -> dict[str, Any]:
        """The head: the table-wide facts and the segments' summaries (their writes are in the segments)."""
        segments = self.writes.segments.values() if isinstance(self.writes, SegmentedWrites) else ()
        return {
            "format": FORMAT,
            "indexed": self.indexed,
            "floor": self.floor,
            "metadata": sorted(set(self.metadata_versions)),
            "schema": self.schema,
            "configuration": self.configuration,
            "partition_types": self.partition_types,
            "segments": [s.to_json() for s in sorted(segments, key=lambda s: s.id)],
        }

    @classmethod
    def from_json(cls, uri: str, data: Mapping[str, Any]) -> HistoryIndex:
        """An index from its head: format 3 reads segments when asked; format 2 holds every write inline."""
        index = cls(uri, int(data["indexed"]), int(data.get("floor", 0)))
        index.metadata_versions = [int(v) for v in data.get("metadata") or []]
        index.schema = data.get("schema")
        index.configuration = dict(data.get("configuration") or {})
        index.partition_types = data.get("partition_types")
        if int(data.get("format", FORMAT)) >= 3:
            segments = [Segment.from_json(s) for s in data.get("segments") or []]
            index.writes = SegmentedWrites(segments, lambda _s: None, index.partition_types)
            return index
        index.writes = _parse_writes(data.get("partitions") or [])
        return index


def _parse_writes(pairs: Iterable[Any]) -> dict[Key, list[Write]]:
    """``[[values, [write, ...]], ...]`` (a segment file, or a format-2 head) as ``{key: writes}``."""
    # [values, writes] pairs: parsed by json in C, keys rebuilt without another parse
    make = Write.from_json
    return {tuple(sorted(values.items())): [make(w) for w in writes] for values, writes in pairs}


def _record_path(version: int) -> str:
    return f"{INDEX_DIR}/commits/{version:020d}.json"


HEAD = f"{INDEX_DIR}/head.json"
SEGMENTS_DIR = f"{INDEX_DIR}/segments"


def _read(log: DeltaLog, rel: str) -> str | None:
    return log.read_beside(rel)


def _write(log: DeltaLog, rel: str, text: str) -> None:
    """Write ``rel`` under the table root atomically (a rename locally, one PUT on S3)."""
    fs, root = log.filesystem
    path = join(root, rel)
    if is_remote(log.uri):  # no directory markers on S3: a key is enough
        with fs.open_output_stream(path) as out:
            out.write(text.encode("utf-8"))
        return
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(text.encode("utf-8"))
    fs.move(tmp, path)


def _record_of(version: int, actions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A commit record from the commit's actions: its info and, per partition touched, the rows it added."""
    info: dict[str, Any] = {}
    parts: dict[Key, dict[str, Any]] = {}
    metadata = False
    shape = None
    configuration = None
    partition_types = None
    for action in actions:
        if "commitInfo" in action:
            info = dict(action["commitInfo"])
        if "metaData" in action:
            metadata = True
            meta = action["metaData"]
            configuration = dict(meta.get("configuration") or {})
            partition_types = _partition_types(meta)
            text = json.dumps([meta.get("schemaString"), meta.get("partitionColumns")], sort_keys=True)
            shape = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        body = action.get("add") or action.get("remove")
        if not body:
            continue
        values = dict(body.get("partitionValues") or {})
        entry = parts.setdefault(
            key_of(values), {"values": values, "rows": 0, "change": False, "added": False}
        )
        entry["change"] = entry["change"] or body.get("dataChange", True) is not False
        if "add" in action:
            entry["added"] = True
        if "add" in action and entry["rows"] is not None:
            try:
                entry["rows"] += int(json.loads(action["add"].get("stats") or "{}")["numRecords"])
            except (KeyError, TypeError, ValueError):
                entry["rows"] = None
    return {
        "version": version,
        "timestamp": info.get("timestamp"),
        "info": info,
        "partitions": list(parts.values()),
        "metadata": metadata,
        "shape": shape,
        "configuration": configuration,
        "partition_types": partition_types,
    }


def _partition_types(meta: Mapping[str, Any]) -> dict[str, str] | None:
    """``{partition column: Delta type}`` from a ``metaData`` action (None when unreadable)."""
    from airflow_provider_dltrain.lake.filters import partition_types

    return partition_types(meta.get("schemaString"), meta.get("partitionColumns") or [])


def _load_head(log: DeltaLog, stats: Stats) -> HistoryIndex | None:
    text = _read(log, HEAD)
    stats.reads += 1
    if not text:
        return None
    try:
        data = json.loads(text)
        if int(data.get("format", 0)) not in (2, FORMAT):
            return None
        index = HistoryIndex.from_json(log.uri, data)
    except (ValueError, KeyError, TypeError):
        logger.warning("ignoring the unreadable history index of %s; rebuilding it from the log", log.uri)
        return None
    if isinstance(index.writes, SegmentedWrites):
        index.writes.connect(_segment_reader(log, stats), lambda: _rebuilt_writes(log, index.indexed))
    return index


def _segment_reader(log: DeltaLog, stats: Stats) -> Callable[[Segment], list[tuple[Key, list[Write]]] | None]:
    def read(segment: Segment) -> list[tuple[Key, list[Write]]] | None:
        text = _read(log, f"{SEGMENTS_DIR}/{segment.file}") if segment.file else None
        stats.reads += 1
        if not text:
            return None
        # each load reads the file (what it holds now decides); parsing the same text again is skipped:
        # a backfill plan loads the index for every date. Writes are immutable; the lists are copied.
        parsed = _parsed_segment(text)
        return [(key, list(writes)) for key, writes in parsed]

    return read


_PARSED: dict[bytes, list[tuple[Key, list[Write]]]] = {}
_PARSED_MAX = 256  # segments of about 1,000 partitions each: a few years of several tables


def _parsed_segment(text: str) -> list[tuple[Key, list[Write]]]:
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    found = _PARSED.get(digest)
    if found is None:
        found = list(_parse_writes(json.loads(text)["partitions"]).items())
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))  # the oldest parse goes first
        _PARSED[digest] = found
    return found


def _rebuilt_writes(log: DeltaLog, upto: int) -> dict[Key, list[Write]]:
    logger.warning(
        "a segment of the history index of %s is gone (a head.json older than its segments); rebuilding "
        "the partition writes from the log and the commit records up to version %d",
        log.uri,
        upto,
    )
    try:
        fresh = load(log.uri, log.storage_options, newest=upto, use_head=False)
    except TableNotFoundError:  # the commits up to the head are gone too: what a lost index knows
        fresh = load(log.uri, log.storage_options, use_head=False)
    return dict(fresh.writes) if fresh is not None else {}


def _first_existing_commit(log: DeltaLog, low: int, high: int) -> int | None:
    """The oldest commit file in ``[low, high]``; log retention removes a prefix, so bisect."""
    if not log.commit_exists(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if log.commit_exists(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _infer_snapshot(
    index: HistoryIndex, log: DeltaLog, version: int, storage_options: StorageOptions | None
) -> None:
    """Stand in for commits whose files are gone: every partition live at ``version`` (the oldest
    readable) gets an INFERRED write there, and so does every partition known before that is not live."""
    from airflow_provider_dltrain.lake.table import open_table

    table = open_table(log.uri, version, storage_options)
    index.configuration = dict(table.metadata().configuration or {})
    # the snapshot's schema types its partition values (filters compare them in that type)
    index.partition_types = _partition_types(
        {"schemaString": table.schema().to_json(), "partitionColumns": table.metadata().partition_columns}
    )
    live = {key_of(dict(p)): dict(p) for p in table.partitions()}
    timestamp = log.commit_info(version).get("timestamp")
    for key in set(live) | set(index.writes):
        index._add(key, Write(version, timestamp, None, INFERRED | FILES))
    index.floor = version
    index.indexed = version


def load(
    uri: str,
    storage_options: StorageOptions | None = None,
    *,
    newest: int | None = None,
    persist: bool = False,
    use_head: bool = True,
) -> HistoryIndex | None:
    """The table's history index, caught up to ``newest`` (default the newest version); None: no table.

    The index may hold versions after ``newest`` (its head is further on): readers ask for what
    they need as of a version. Inside :func:`.state.one_state` a table's index is read once.

    :param persist: write what was caught up (new commit records and the head) back to the table.
        The provider's writers and maintenance do; readers never write.
    :param use_head: False: ignore ``head.json`` and build from the log and the commit records.
    """
    kept = state.kept()
    if kept is None or persist:
        return _load(uri, storage_options, newest, persist, use_head)
    question = (
        "history index",
        uri.rstrip("/"),
        tuple(sorted((str(k), str(v)) for k, v in (storage_options or {}).items())),
        use_head,
    )
    found = kept.get(question)
    if found is not None and (found[1] if newest is None else found[0].indexed >= newest):
        return found[0]
    index = _load(uri, storage_options, newest, persist, use_head)
    if index is not None:
        kept[question] = (index, newest is None)
    return index


def _load(
    uri: str, storage_options: StorageOptions | None, newest: int | None, persist: bool, use_head: bool
) -> HistoryIndex | None:
    log = DeltaLog(uri, storage_options)
    stats = Stats()
    head = _load_head(log, stats) if use_head else None
    had_head = head is not None
    index = head or HistoryIndex(log.uri)
    index.stats = stats
    index._log = log
    hint = index.indexed if index.indexed >= 0 else None
    latest = log.latest_version(at_least=hint) if newest is None else newest
    if latest is None:
        return None
    new_records: list[dict[str, Any]] = []
    version = index.indexed + 1
    while version <= latest:
        record = index.record(version)
        if record is None:  # removed by log retention before it was indexed
            first = _first_existing_commit(log, version, latest)
            if first is None:
                raise TableNotFoundError(f"{log.uri}: no commit file between {version} and {latest}")
            _infer_snapshot(index, log, first, storage_options)
            version = first  # its own commit file is there: what it wrote is known, not inferred
            continue
        stats.caught_up += 1
        index._apply(record, bool(record.get("metadata")))
        new_records.append(record)
        version += 1
    if persist and (new_records or not had_head):
        _persist(index, log, new_records)
    return index


def _persist(index: HistoryIndex, log: DeltaLog, records: list[dict[str, Any]]) -> None:
    try:
        for record in records:
            # immutable in content (one version, one commit): written again by a racing writer, unchanged
            path = _record_path(int(record["version"]))
            _write(log, path, json.dumps(record, sort_keys=True, separators=(",", ":")))
        current = re.search(r'"indexed":(-?\d+)', _read(log, HEAD) or "")
        if current is not None and int(current.group(1)) >= index.indexed:
            return  # a racing writer got further: its head holds ours
        replaced = _write_segments(index, log)
        _write(log, HEAD, json.dumps(index.to_json(), separators=(",", ":")))
        for name in replaced:  # a generation back: a reader of the previous head still finds its files
            _remove(log, f"{SEGMENTS_DIR}/{name}")
    except OSError as err:  # the index is a cache: a commit that happened stays done
        logger.warning("could not update the history index of %s: %s", log.uri, err)


def _write_segments(index: HistoryIndex, log: DeltaLog) -> list[str]:
    """Write the segments this catch-up changed (all of them for an index built from the log or read
    from a format-2 head); the files their previous versions replaced, to remove after the head."""
    writes = index.writes
    if not isinstance(writes, SegmentedWrites):
        writes = SegmentedWrites.of(writes, index.partition_types)
        index.writes = writes
    writes.types = index.partition_types
    replaced = []
    for segment, items in writes.to_write():
        summarise(segment, items, index.partition_types)
        name = f"{segment.id:06d}-{index.indexed:020d}.json"
        body = {"partitions": [[dict(key), [w.to_json() for w in ws]] for key, ws in items]}
        _write(log, f"{SEGMENTS_DIR}/{name}", json.dumps(body, separators=(",", ":")))
        if segment.file != name:
            replaced += [segment.previous] if segment.previous else []
            segment.previous, segment.file = segment.file, name
    writes.changed.clear()
    return replaced


def _remove(log: DeltaLog, rel: str) -> None:
    fs, root = log.filesystem
    try:
        fs.delete_file(join(root, rel))
    except OSError as err:  # left behind: a file no head names costs storage, never an answer
        logger.warning("could not remove %s of the history index of %s: %s", rel, log.uri, err)


def update(uri: str, storage_options: StorageOptions | None = None) -> HistoryIndex | None:
    """Catch the index up with the log and write it back (after each commit of the provider)."""
    try:
        return load(uri, storage_options, persist=True)
    except Exception as err:  # never fail a write that is committed
        logger.warning("could not update the history index of %s: %s", uri, err)
        return None


def canonical(key: Key) -> str:
    """The ``dltrain.partition`` JSON of a key."""
    return _canonical(key)
