"""Cheap reads of a Delta transaction log: newest version, commit info, partitions present.

Opening a ``DeltaTable`` loads the whole active-file list, whose cost grows with the table. A
sensor pokes often, so these functions read only what they need: ``_last_checkpoint``, a
logarithmic number of existence probes for newer commit files, one checkpoint's ``add`` column
and the few commit files after it. Anything unusual (v2 checkpoints, missing files) falls back to
delta-rs, which is always correct.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, join, normalize_uri

LOG_DIR = "_delta_log"


class DeltaLog:
    """Read-only view of one table's ``_delta_log`` through a pyarrow filesystem."""

    def __init__(self, uri: str, storage_options: StorageOptions | None = None) -> None:
        self.uri = normalize_uri(uri)
        self.storage_options = storage_options or {}
        self._fs, self._root = filesystem(self.uri, self.storage_options)
        self._log = join(self._root, LOG_DIR)

    # -- files --------------------------------------------------------------------------------
    def _commit_path(self, version: int) -> str:
        return join(self._log, f"{version:020d}.json")

    def _exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self._fs.get_file_info(path).type != pafs.FileType.NotFound)

    def _read_text(self, path: str) -> str | None:
        try:
            with self._fs.open_input_stream(path) as stream:
                return bytes(stream.read()).decode("utf-8")
        except (FileNotFoundError, OSError):
            return None

    def commit_exists(self, version: int) -> bool:
        return self._exists(self._commit_path(version))

    def last_checkpoint(self) -> dict[str, Any] | None:
        text = self._read_text(join(self._log, "_last_checkpoint"))
        return json.loads(text) if text else None

    # -- versions -----------------------------------------------------------------------------
    def latest_version(self, at_least: int | None = None) -> int | None:
        """Newest committed version, or ``None`` when no table exists at the URI.

        Starts from the newest checkpoint (or ``at_least``), then gallops forward over commit
        files: O(log n) existence checks for n commits since the checkpoint.
        """
        checkpoint = self.last_checkpoint()
        low = max(int(checkpoint["version"]) if checkpoint else -1, at_least if at_least is not None else -1)
        if low >= 0 and not self.commit_exists(low) and checkpoint is None:
            low = -1
        if low < 0:
            if not self.commit_exists(0):
                return None
            low = 0
        step = 1
        high = low + step
        while self.commit_exists(high):
            low, step = high, step * 2
            high = low + step
        # invariant: low exists, high does not
        while high - low > 1:
            mid = (low + high) // 2
            if self.commit_exists(mid):
                low = mid
            else:
                high = mid
        return low

    def commit_actions(self, version: int) -> list[dict[str, Any]]:
        text = self._read_text(self._commit_path(version))
        if text is None:
            raise TableNotFoundError(
                f"version {version} of {self.uri} has no commit file (never written, or its log was cleaned up)"
            )
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def commit_info(self, version: int) -> dict[str, Any]:
        for action in self.commit_actions(version):
            if "commitInfo" in action:
                return dict(action["commitInfo"])
        return {}

    def ref(self, version: int) -> DeltaRef:
        info = self.commit_info(version)
        return DeltaRef(self.uri, version, millis_to_iso(info.get("timestamp")))

    # -- partitions ---------------------------------------------------------------------------
    def partitions(self, version: int) -> set[tuple[tuple[str, str | None], ...]] | None:
        """Partition value tuples with at least one active file at ``version``.

        Returns ``None`` when the fast path cannot answer (the caller falls back to delta-rs).
        """
        checkpoint = self.last_checkpoint()
        start = 0
        active: dict[str, tuple[tuple[str, str | None], ...]] = {}
        if checkpoint and int(checkpoint["version"]) <= version:
            loaded = self._checkpoint_adds(checkpoint)
            if loaded is None:
                return None
            active = loaded
            start = int(checkpoint["version"]) + 1
        for v in range(start, version + 1):
            for action in self.commit_actions(v):
                if "add" in action:
                    add = action["add"]
                    active[add["path"]] = _pv_key(add.get("partitionValues"))
                elif "remove" in action:
                    active.pop(action["remove"]["path"], None)
        return set(active.values())

    def _checkpoint_adds(self, checkpoint: dict[str, Any]) -> dict[str, tuple[tuple[str, str | None], ...]] | None:
        import pyarrow.parquet as pq

        if "v2Checkpoint" in checkpoint or "checkpointSchema" in checkpoint and "sidecar" in str(checkpoint):
            return None
        version = int(checkpoint["version"])
        parts = checkpoint.get("parts")
        if parts:
            names = [f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet" for i in range(1, int(parts) + 1)]
        else:
            names = [f"{version:020d}.checkpoint.parquet"]
        active: dict[str, tuple[tuple[str, str | None], ...]] = {}
        for name in names:
            path = join(self._log, name)
            if not self._exists(path):
                return None
            with self._fs.open_input_file(path) as handle:
                table = pq.read_table(handle, columns=["add"])
            for add in table.column("add").to_pylist():
                if add is not None and add.get("path"):
                    active[add["path"]] = _pv_key(add.get("partitionValues"))
        return active


def _pv_key(values: Any) -> tuple[tuple[str, str | None], ...]:
    if not values:
        return ()
    items = values.items() if isinstance(values, dict) else values  # checkpoint maps are lists of pairs
    return tuple(sorted((str(k), None if v is None else str(v)) for k, v in items))


def iter_history(log: DeltaLog, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(version, commitInfo)`` for versions in ``[start, stop]``."""
    for v in range(start, stop + 1):
        yield v, log.commit_info(v)
