"""What the commit that last wrote a partition recorded, and a cheap fingerprint of a pinned version's rows.

Both serve the decision an operator takes before it starts Spark or submits a job: would this run
rewrite the partition with the content it already holds? The facts a write was computed from are
recorded in its commit (:data:`META_RERUN_FACTS`); :func:`last_write` finds the commit that last
touched a partition (an overwrite, another tool's delete or compaction alike) in the table's history
index, at the same cost whatever the length of the history.

:func:`version_fingerprint` names the rows a pinned version gives a reader with a filter, without
reading them: per partition the content digest its last commit recorded
(:mod:`~airflow_provider_dltrain.lake.digest`), or, where none was recorded, its data files and the
rows their deletion vectors drop (Delta data files are never rewritten in place), plus the schema.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import HistoryGoneError
from airflow_provider_dltrain.lake import history
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.digest import (
    META_DIGEST,
    META_PARTITION,
    canonical_partition,
)
from airflow_provider_dltrain.lake.history_index import INDEX_DIR
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.row_hash import canonical_schema
from airflow_provider_dltrain.lake.storage import StorageOptions

# Commit metadata keys of the operators' writes.
META_RERUN_FACTS = "dltrain.rerun_facts"  # JSON: the facts the write was computed from
META_RERUN_CHANGED = "dltrain.rerun_changed"  # why it was computed: the facts that changed, or another reason


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class LastWrite:
    """The commit that last added or removed files of a partition, as of the newest version."""

    ref: DeltaRef
    info: dict[str, Any]  # its commitInfo
    newest: int  # the table's newest version when it was looked up
    metadata_changed_since: bool  # a later commit changed the schema, partitioning or properties
    rows: int | None  # rows its files hold in the partition (their stats), None when unknown
    # its commit is older than the table's log and the history index holds no record of it (log
    # retention ran before the index saw it, or the table was copied without ``_dltrain_history``):
    # whatever it recorded is unknown, which is not the same as "it recorded nothing"
    facts_lost: bool = False

    def recorded_facts(self) -> dict[str, Any] | None:
        """The facts it recorded for exactly this partition, or None (another tool, an older release)."""
        text = self.info.get(META_RERUN_FACTS)
        if not text:
            return None
        try:
            facts = json.loads(text)
        except ValueError:
            return None
        return facts if isinstance(facts, dict) else None

    def wrote(self, partition: Mapping[str, object]) -> bool:
        """Whether the commit says it replaced exactly ``partition`` (every write of this provider does)."""
        return self.info.get(META_PARTITION) == canonical_partition(part.validate_partition(partition))


def last_write(
    uri: str, partition: Mapping[str, object], storage_options: StorageOptions | None = None
) -> LastWrite | None:
    """The newest commit that touched ``partition``; None with no table or no such commit.

    From the table's history index (:mod:`.history_index`): the index's head, the commits after it and
    one commit record, however long the history; the record outlives the commit file that log
    retention removes. A partition whose last write the index only knows as the oldest readable
    version (its log was gone before it was indexed) has ``facts_lost``: what that write recorded is
    unknown (:func:`facts_lost_error` says why and what to do).
    """
    from airflow_provider_dltrain.lake import history_index

    spec = part.validate_partition(partition)
    index = history_index.load(uri, storage_options)
    if index is None:
        return None
    # a compaction since (same rows in other files) leaves the facts of the write before it standing
    write = index.last_data_write(history.key_of(spec))
    if write is None or not (write.files or write.recorded):
        return None
    info = {} if write.inferred else index.info(write.version)
    record = None if write.inferred else index.record(write.version)
    rows = _rows_of(record, history.key_of(spec))
    changed = index.metadata_changed(write.version)
    return LastWrite(write.ref(index.uri), info, index.indexed, changed, rows, facts_lost=write.inferred)


def _rows_of(record: Mapping[str, Any] | None, key: history.Key) -> int | None:
    for entry in (record or {}).get("partitions") or []:
        if history.key_of(entry.get("values") or {}) == key:
            rows = entry.get("rows")
            return int(rows) if rows is not None else None
    return 0 if record is not None else None


def version_fingerprint(
    ref: DeltaRef, filters: Any = None, storage_options: StorageOptions | None = None
) -> dict[str, Any]:
    """``{"partitions", "hash"}`` naming the rows ``ref`` gives a reader with ``filters``.

    ``filters`` are delta-rs DNF tuples; the filter itself is not part of the hash (the caller
    records it with its parameters). When every partition the filter selects was written by this
    provider (a recorded content digest), the table's history index alone answers: no log walk,
    no snapshot of the version, the same few reads whatever the history (:func:`_from_index`). Else
    the version's scan names the rows: digests where recorded, the files themselves elsewhere (and
    then the schema, which a digest already holds). Both give the same hash for the same rows.
    """
    fast = _from_index(ref, filters, storage_options)
    if fast is not None:
        return fast
    from airflow_provider_dltrain.lake.reader import ScanFile, scan_version

    scan = scan_version(ref, storage_options, filters)
    groups: dict[history.Key, list[ScanFile]] = {}
    for f in scan.files:
        groups.setdefault(history.key_of(dict(f.partition)), []).append(f)
    log = DeltaLog(ref.uri, storage_options)
    writes = history.newest_writes(log, ref.version, list(groups), "partitions read", stop_at_gap=True)
    parts = []
    for key, files in groups.items():
        name = canonical_partition(dict(key))
        commit = writes.get(key)
        info = commit.info if commit is not None else {}
        digest = info.get(META_DIGEST) if info.get(META_PARTITION) == name else None
        if digest:
            parts.append([name, "digest", digest])
        else:  # written by another tool, or deleted from since: the files themselves name the rows
            parts.append([name, "files", sorted([f.uri, list(f.deleted_rows)] for f in files)])
    return _fingerprint(parts, canonical_schema(scan.schema))


def _fingerprint(parts: list[list[Any]], schema: str | None) -> dict[str, Any]:
    by_digest = all(p[1] == "digest" for p in parts)
    body: dict[str, Any] = {"partitions": sorted(parts)}
    if not by_digest:  # a content digest already hashes the schema; file names do not
        body["schema"] = schema
    text = _json(body)
    return {"partitions": len(parts), "hash": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _from_index(ref: DeltaRef, filters: Any, storage_options: StorageOptions | None) -> dict[str, Any] | None:
    """The fingerprint from the history index, or None when a selected partition's rows have no
    recorded digest, a filter names a non-partition column, or partition columns are not strings."""
    from airflow_provider_dltrain.exceptions import InvalidSpecError
    from airflow_provider_dltrain.lake import history_index
    from airflow_provider_dltrain.lake.filters import dnf_selector, normalize_filter

    index = history_index.load(ref.uri, storage_options, newest=ref.version)
    types = index.partition_types if index is not None else None
    if index is None or not types or any(t != "string" for t in types.values()):
        return None
    conjunctions = [filters] if filters and isinstance(filters[0], tuple) else list(filters or [])
    if any(column not in types for conj in conjunctions for column, _, _ in conj):
        return None
    try:
        dnf = normalize_filter(conjunctions)  # once, not once per partition
    except InvalidSpecError:
        dnf = ()  # not a filter the index decides: every partition may be selected
    selects = dnf_selector(dnf, types)
    found = index.candidates(dnf, tuple(types))
    if found is None:
        return None
    keys, exact = found
    parts = []
    for key in keys:
        values = dict(key)
        if not exact and not selects(values):
            continue
        write = index.last_write(key, ref.version)
        if write is None or (write.digest is None and write.content_known):
            continue  # never written by then, or recorded empty: no rows selected
        if not write.content_known or write.digest is None:
            return None
        parts.append([canonical_partition(values), "digest", write.digest])
    return _fingerprint(parts, None)


def facts_lost_error(table_uri: str, where: str, oldest: int) -> HistoryGoneError:
    """The refusal of a re-run whose partition's last write in ``table_uri`` has ``facts_lost``
    (``oldest``: the oldest version that table's log holds), raised before anything is written:
    computing it could commit a different answer (other input versions, say) for a date whose
    nightly answer cannot be compared any more."""
    return HistoryGoneError(
        f"{where}: its last write is older than the table's log (version {oldest} is the oldest "
        f"it still holds: log retention removed the commit files before it) and the table's history index "
        f"({table_uri}/{INDEX_DIR}/) holds no record of it, e.g. a copy of the table made without that "
        "folder. The facts that write was computed from are gone, so whether a re-run gives the same answer "
        f"cannot be told, and nothing was written. Copy {INDEX_DIR}/ over from the table this one was copied "
        "from, or run with force=True to recompute the partition on today's data (a new version)."
    )
