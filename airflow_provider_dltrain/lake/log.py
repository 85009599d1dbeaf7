"""Cheap reads of a Delta transaction log: newest version, commit info, partitions present, and
whether a commit changed data or only maintained the table.

Opening a ``DeltaTable`` loads the whole active-file list, whose cost grows with the table. A
sensor pokes often, so these functions read only what they need: ``_last_checkpoint``, a
logarithmic number of existence probes for newer commit files, one checkpoint's ``add`` column
and the few commit files after it. Anything unusual (v2 checkpoints, missing files) falls back to
delta-rs, which is always correct.

Why this exists beside delta-rs: ``benchmarks/bench_sensor.py`` shows a poke through these reads
costs the same at 1,000 commits as at 10, while opening the table grows with it; and delta-rs'
Python API exposes a commit's ``commitInfo`` (``history()``) but not its add/remove actions, which
the partition pins, content digests and lineage (``lake/history.py``) need per commit. Everything
that changes a table goes through delta-rs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.exceptions import StorageReadError, TableNotFoundError
from airflow_provider_dltrain.lake import state
from airflow_provider_dltrain.lake.ref import DeltaRef, millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, join, normalize_uri

LOG_DIR = "_delta_log"

# Operations that never change the rows a reader of the table sees. Compared with
# ``commitInfo.operation`` only for commits that add or remove no file with ``dataChange: true``
# (see :func:`changes_data`); any other operation, a new one included, counts as changing data.
MAINTENANCE_OPERATIONS = frozenset(
    {
        "VACUUM START",
        "VACUUM END",
        "OPTIMIZE",
        "REORG",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "ADD FEATURE",
        "DROP FEATURE",
        "UPGRADE PROTOCOL",
        "UPDATE TABLE METADATA",
        "UPDATE FIELD METADATA",
        "COMPUTE STATS",
    }
)


def changes_data(actions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a commit (its actions) changed the table's rows, or only maintained the table.

    The file actions' ``dataChange`` flags decide first: the protocol sets it to ``false`` exactly
    when files are only rearranged (OPTIMIZE, Z-order, purging deletion vectors), so any ``add`` or
    ``remove`` with ``dataChange: true`` (or without the flag) is a data change, whatever the
    operation is called. A commit without such files is maintenance when its ``commitInfo.operation``
    is one of :data:`MAINTENANCE_OPERATIONS` (VACUUM START/END add no file at all), or when it only
    rearranges files and changes no metadata; anything else (an unknown operation, a schema change,
    CREATE TABLE, an empty WRITE) counts as a data change, so that a new kind of commit is never
    silently ignored.
    """
    files = [body for action in actions for body in (action.get("add"), action.get("remove")) if body]
    if any(body.get("dataChange", True) is not False for body in files):
        return True
    info = next((action["commitInfo"] for action in actions if "commitInfo" in action), None) or {}
    if str(info.get("operation") or "").strip().upper() in MAINTENANCE_OPERATIONS:
        return False
    return not files or any("metaData" in action for action in actions)


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
        """The file's text, or None when there is no such file.

        Only "not found" reads as absent: a file that could not be read (a timeout, a refused
        connection, access denied) raises, never passing for a commit removed by log retention or
        a history record never written, which would change what a run decides.
        """
        try:
            with self._fs.open_input_stream(path) as stream:
                return bytes(stream.read()).decode("utf-8")
        except (FileNotFoundError, NotADirectoryError):  # the latter: a path inside a plain file
            return None
        except OSError as err:
            raise StorageReadError(
                f"could not read {path} of {self.uri}: {err} (the storage did not answer; "
                "the task's retry reads it again)"
            ) from err

    def read_beside(self, rel: str) -> str | None:
        """A text file under the table root (not in the log), or None when there is none."""
        return self._read_text(join(self._root, rel))

    @property
    def filesystem(self) -> tuple[Any, str]:
        """The pyarrow filesystem and the table root's path in it."""
        return self._fs, self._root

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
        low = int(checkpoint["version"]) if checkpoint else -1
        # ``at_least`` is only a hint: trusting a version that was never committed would report it
        if at_least is not None and at_least > low and self.commit_exists(at_least):
            low = at_least
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
                f"version {version} of {self.uri} has no commit file "
                "(never written, or its log was cleaned up)"
            )
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def changes_data(self, version: int) -> bool:
        """Whether commit ``version`` changed the table's rows (see :func:`changes_data`)."""
        return changes_data(self.commit_actions(version))

    # Deciding from the commit file's actions costs one small read per commit looked at, the same
    # file the commit info comes from: cheaper than asking delta-rs (``history()`` reads every
    # commit) and more robust than the operation's name alone, which other writers choose freely.
    def newest_data_version(self, latest: int, floor: int = 0) -> int | None:
        """The newest version ``>= floor`` (at or below ``latest``) whose commit changed data.

        ``None`` when every commit from ``floor`` to ``latest`` only maintained the table. Reads the
        commits from ``latest`` down, so the cost is the number of maintenance commits made since the
        last data change (or since ``floor``). When a commit file below them was removed by log
        retention, the oldest retained one stands in: maintenance commits keep the rows, so it reads
        the same rows as the data change that is gone.
        """
        for version in range(latest, max(floor, 0) - 1, -1):
            try:
                if self.changes_data(version):
                    return version
            except TableNotFoundError:  # cleaned-up log: the maintenance commit above it stands in
                return version + 1 if version < latest else None
        return None

    def oldest_data_version(self, after: int, upto: int) -> int:
        """The oldest version in ``(after, upto]`` whose commit changed data; ``upto`` when none did.

        For the watcher of new versions, which fires for data changes one by one: the caller knows
        ``upto`` changed data. Commit files removed by log retention are skipped.
        """
        for version in range(after + 1, upto):
            try:
                if self.changes_data(version):
                    return version
            except TableNotFoundError:
                continue
        return upto

    def commit_info(self, version: int) -> dict[str, Any]:
        for action in self.commit_actions(version):
            if "commitInfo" in action:
                return dict(action["commitInfo"])
        return {}

    def ref(self, version: int) -> DeltaRef:
        info = self.commit_info(version)
        return DeltaRef(self.uri, version, millis_to_iso(info.get("timestamp")))

    # -- partitions ---------------------------------------------------------------------------
    def has_partition(self, version: int, wanted: Sequence[tuple[str, str]]) -> bool | None:
        """Whether ``version`` has a live file whose partition values include every ``wanted`` pair.

        Reads the commits from ``version`` back to the newest checkpoint at or below it (that
        checkpoint's own commit included), stopping at the first live file of the partition, then
        only the checkpoint's row groups whose statistics allow the values, and of those only
        ``add.path`` and ``add.partitionValues``. The cost depends on the checkpoint interval and
        the number of live files, never on the length of the history. ``None`` when the fast path
        cannot answer.
        """
        checkpoint = self.last_checkpoint()
        base = int(checkpoint["version"]) if checkpoint and int(checkpoint["version"]) <= version else -1
        removed: set[str] = set()
        for v in range(version, base - 1 if base >= 0 else -1, -1):
            actions = self._commit_file_actions(v)
            if actions is None and v == base:  # the checkpoint holds that commit's outcome anyway
                break
            if actions is None:  # cleaned-up log or unreadable file: let delta-rs answer
                return None
            # an add and a remove of one path in one commit (a new deletion vector): the add is live
            for action in actions:
                add = action.get("add")
                if add and add["path"] not in removed and _matches(add.get("partitionValues"), wanted):
                    return True
            removed.update(a["remove"]["path"] for a in actions if a.get("remove"))
        if base < 0:
            return False
        assert checkpoint is not None
        paths = self._checkpoint_paths(checkpoint, wanted)
        return None if paths is None else bool(paths - removed)

    def _commit_file_actions(self, version: int) -> list[dict[str, Any]] | None:
        """The actions of commit file ``version`` (None: not there); parsed once inside a
        :func:`~.state.one_state` block (a commit file never changes)."""
        kept = state.kept()
        question = ("commit actions", self.uri, version)
        if kept is not None and question in kept:
            return kept[question]  # type: ignore[no-any-return]
        text = self._read_text(self._commit_path(version))
        actions = None if text is None else [json.loads(line) for line in text.splitlines() if line.strip()]
        if kept is not None and actions is not None:
            kept[question] = actions
        return actions

    def _checkpoint_paths(
        self, checkpoint: dict[str, Any], wanted: Sequence[tuple[str, str]]
    ) -> set[str] | None:
        """Paths of the checkpoint's ``add`` actions in the wanted partition (matched in Arrow).

        Reads only the row groups whose statistics may hold the wanted values; inside a
        :func:`~.state.one_state` block, every row group once for all the partitions asked about."""
        names = self._checkpoint_names(checkpoint)
        if names is None:
            return None
        kept = state.kept()
        if kept is None:
            adds = self._checkpoint_adds(names, wanted)
        else:
            question = ("checkpoint adds", self.uri, tuple(names))
            if question not in kept:
                kept[question] = _paths_by_value(self._checkpoint_adds(names, None))
            by_value = kept[question]
            if by_value is None:
                return None
            # the paths holding every wanted pair: the smallest set's, kept by the others
            sets = sorted((by_value.get(pair, set()) for pair in wanted), key=len) or [by_value[None]]
            return set(sets[0]).intersection(*sets[1:])
        if adds is None:
            return None
        paths: set[str] = set()
        for add in adds:
            found = _paths_in_partition(add, wanted)
            if found is None:
                return None
            paths.update(found)
        return paths

    def _checkpoint_adds(
        self, names: Sequence[str], wanted: Sequence[tuple[str, str]] | None
    ) -> list[Any] | None:
        """Each checkpoint part's ``add`` column (path, partition values): the row groups that may
        hold ``wanted`` (every row group with None); None: unreadable."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        adds = []
        for name in names:
            try:
                # ParquetFile: a quarter of read_table's fixed cost, which dominates small files
                with self._fs.open_input_file(join(self._log, name)) as handle:
                    checkpoint_file = pq.ParquetFile(handle)
                    groups = (
                        list(range(checkpoint_file.num_row_groups))
                        if wanted is None
                        else _groups_that_may_hold(checkpoint_file.metadata, wanted)
                    )
                    if not groups:  # e.g. waiting for a date later than every date in the table
                        continue
                    table = checkpoint_file.read_row_groups(
                        groups, columns=["add.path", "add.partitionValues"], use_threads=False
                    )
                adds.append(table.column("add").combine_chunks())
            except (OSError, KeyError, AttributeError, ValueError, pa.ArrowException):
                return None
        return adds

    def _checkpoint_names(self, checkpoint: dict[str, Any]) -> list[str] | None:
        if "v2Checkpoint" in checkpoint or (
            "checkpointSchema" in checkpoint and "sidecar" in str(checkpoint)
        ):
            return None
        version = int(checkpoint["version"])
        parts = checkpoint.get("parts")
        if parts:
            total = int(parts)
            return [f"{version:020d}.checkpoint.{i:010d}.{total:010d}.parquet" for i in range(1, total + 1)]
        return [f"{version:020d}.checkpoint.parquet"]


_VALUE_LEAF = "add.partitionValues.key_value.value"


def _groups_that_may_hold(metadata: Any, wanted: Sequence[tuple[str, str]]) -> list[int]:
    """Row groups whose partition-value statistics do not rule the wanted values out.

    Min/max over all partition values of a row group bound every column's value, so a wanted value
    outside them cannot occur there. Validated partition values are ASCII, where Parquet's byte
    order is Python's string order. Without statistics a group is kept.
    """
    schema = metadata.schema
    leaf = next((i for i in range(metadata.num_columns) if schema.column(i).path == _VALUE_LEAF), None)
    groups = list(range(metadata.num_row_groups))
    if leaf is None:
        return groups
    kept = []
    for group in groups:
        stats = metadata.row_group(group).column(leaf).statistics
        low, high = (stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None)
        if not (isinstance(low, str) and isinstance(high, str)) or all(low <= v <= high for _, v in wanted):
            kept.append(group)
    return kept


def _paths_in_partition(adds: Any, wanted: Sequence[tuple[str, str]]) -> list[str] | None:
    """Paths of the non-null ``add`` structs whose partition map holds every wanted pair."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    values = adds.field("partitionValues")  # MapArray; pyarrow's map_lookup can abort on these
    offsets = values.offsets.to_numpy()
    if len(values.keys) != offsets[-1] - offsets[0] or offsets[0] != 0:
        return None  # a sliced map array: do not guess how its entries line up
    hits = np.zeros(len(values.keys), dtype=np.int64)
    for column, value in wanted:
        pair = pc.and_(pc.equal(values.keys, column), pc.equal(values.items, value))
        hits += pc.fill_null(pair, False).to_numpy(zero_copy_only=False)
    parent = np.repeat(np.arange(len(values)), np.diff(offsets))
    per_row = np.bincount(parent, weights=hits, minlength=len(values))
    rows = np.nonzero((per_row == len(wanted)) & adds.is_valid().to_numpy(zero_copy_only=False))[0]
    return [p for p in adds.field("path").take(pa.array(rows, pa.int64())).to_pylist() if p]


def _paths_by_value(adds: list[Any] | None) -> dict[tuple[str, str] | None, set[str]] | None:
    """``{(column, value): paths of the add actions with that partition value}`` of a checkpoint's
    ``add`` columns (``None``: every path), read once for every partition a block asks about (None:
    unreadable)."""
    if adds is None:
        return None
    by_value: dict[tuple[str, str] | None, set[str]] = {None: set()}
    for add in adds:
        for row in add.to_pylist():
            if row is None or not row.get("path"):
                continue
            by_value[None].add(row["path"])
            for column, value in row.get("partitionValues") or ():
                by_value.setdefault((column, value), set()).add(row["path"])
    return by_value


def _matches(values: Any, wanted: Sequence[tuple[str, str]]) -> bool:
    values = values or {}
    return all(values.get(column) == value for column, value in wanted)
