"""Which quarantine partition belongs to which main-table content: a pairing a kill cannot break.

A write with a quarantine commits two Delta tables, and no transaction spans both. The main table
is committed first, recording how many rows it quarantined (:data:`META_ROWS_QUARANTINED`); the
quarantine second, recording the main commit it belongs to (:data:`META_MAIN_VERSION`, the version
of the main table's last commit of the partition, and :data:`META_MAIN_DIGEST`, its content
digest). Main first, because the main table is what consumers read: a kill between the two
commits leaves the new rows with the previous run's quarantine, and :func:`quarantine_pairing`
tells that quarantine apart as stale instead of showing it as the bad rows of these rows. The
re-run finds the main partition unchanged (no commit) and commits the quarantine with the pairing,
even when its rows equal the stale ones. The other order would leave a quarantine naming a main
commit that never happened, which only a later main commit could tell apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.digest import META_DIGEST
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri

META_MAIN_VERSION = "dltrain.main_version"  # quarantine commit: the main commit it belongs to
META_MAIN_DIGEST = "dltrain.main_digest"  # quarantine commit: that main partition's digest ("" = empty)
META_ROWS_QUARANTINED = "dltrain.rows_quarantined"  # main commit: rows its run sent to quarantine

PairingState = Literal["paired", "none", "stale", "lost"]


def last_recorded_commit(
    uri: str,
    partition: Mapping[str, object],
    storage_options: StorageOptions | None = None,
    at_version: int | None = None,
) -> tuple[int, dict[str, Any]] | None:
    """``(version, commitInfo)`` of the newest commit at or before ``at_version`` that recorded it
    wrote ``partition`` (every write of this provider does, an empty one included); ``None`` when
    there is none in the retained log.
    """
    from airflow_provider_dltrain.lake import history_index

    spec = part.validate_partition(partition)
    index = history_index.load(uri, storage_options, newest=at_version)
    if index is None:
        return None
    write = index.last_write(history_index.key_of(spec), at_version, recorded=True)
    if write is None:
        return None
    return write.version, index.info(write.version)


def pairing_metadata(
    main_uri: str,
    partition: Mapping[str, object],
    main_digest: str | None,
    storage_options: StorageOptions | None,
) -> dict[str, str] | None:
    """What the quarantine commit records about the main commit of ``partition`` now in the table."""
    found = last_recorded_commit(main_uri, partition, storage_options)
    if found is None:
        return None
    return {META_MAIN_VERSION: str(found[0]), META_MAIN_DIGEST: main_digest or ""}


@dataclass(frozen=True)
class QuarantinePairing:
    """The quarantine of one main partition: ``paired`` (``quarantine`` holds its bad rows), ``none``
    (the run quarantined nothing and no quarantine commit belongs to it), ``stale`` (a run was
    killed between its two commits, or another tool wrote the main table: the quarantine partition
    holds another run's bad rows; re-run the write) or ``lost`` (the quarantine partition's last
    commit is older than that table's log and absent from its history index, e.g. a copy made
    without ``_dltrain_history``: which main commit it belongs to cannot be told; ``quarantine`` is
    the oldest version holding it).
    """

    main: DeltaRef | None
    quarantine: DeltaRef | None
    state: PairingState

    def to_dict(self) -> dict[str, Any]:
        return {
            "main": self.main.to_dict() if self.main else None,
            "quarantine": self.quarantine.to_dict() if self.quarantine else None,
            "state": self.state,
        }


def quarantine_pairing(
    main_uri: str,
    quarantine_uri: str,
    partition: Mapping[str, object],
    *,
    main_version: int | None = None,
    storage_options: StorageOptions | None = None,
) -> QuarantinePairing:
    """The quarantine commit that belongs to ``partition`` of the main table at ``main_version``.

    Walks the quarantine log back for the newest commit of the partition recording the main commit
    that last wrote it (version and digest); a quarantine commit recording another one is stale.
    """
    spec = part.validate_partition(partition)
    main = last_recorded_commit(main_uri, spec, storage_options, main_version)
    if main is None:
        return QuarantinePairing(None, None, "none")
    version, info = main
    main_ref = DeltaRef(normalize_uri(main_uri), version, millis_to_iso(info.get("timestamp")))
    expected = {META_MAIN_VERSION: str(version), META_MAIN_DIGEST: info.get(META_DIGEST) or ""}
    quarantined = int(info.get(META_ROWS_QUARANTINED, "0") or 0)
    found, lost = _paired_commit(quarantine_uri, spec, expected, storage_options)
    if found is not None:
        return QuarantinePairing(main_ref, found, "paired")
    if lost is not None and quarantined:
        return QuarantinePairing(main_ref, lost, "lost")
    return QuarantinePairing(main_ref, None, "stale" if quarantined else "none")


def _paired_commit(
    uri: str, spec: dict[str, str], expected: Mapping[str, str], storage_options: StorageOptions | None
) -> tuple[DeltaRef | None, DeltaRef | None]:
    """The quarantine commit recording ``expected``; else, when the partition's last write there is
    known only as the oldest readable version (its commit is gone), that version as the second item."""
    paired = _recorded_pairing(uri, spec, expected, storage_options)
    if paired is not None:
        return paired, None
    from airflow_provider_dltrain.lake import history_index

    index = history_index.load(uri, storage_options)
    last = index.last_write(history_index.key_of(spec)) if index is not None else None
    return None, (last.ref(index.uri) if index is not None and last is not None and last.inferred else None)


def _recorded_pairing(
    uri: str, spec: dict[str, str], expected: Mapping[str, str], storage_options: StorageOptions | None
) -> DeltaRef | None:
    from airflow_provider_dltrain.lake import history_index

    index = history_index.load(uri, storage_options)
    if index is None:
        return None
    for write in index.recorded_writes(history_index.key_of(spec)):
        info = index.info(write.version)
        if all(info.get(k) == v for k, v in expected.items()):
            return write.ref(index.uri)
        if int(info.get(META_MAIN_VERSION, "-1") or -1) < int(expected[META_MAIN_VERSION]):
            return None  # older than the main commit: nothing newer can belong to it
    return None
