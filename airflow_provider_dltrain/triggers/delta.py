"""Triggers on a Delta table's log: a deferrable wait for a version, and an asset watcher of new versions."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.ref import DeltaRef


class DeltaTableVersionTrigger(BaseTrigger):
    """Fire once the newest version of a Delta table that changed data meets every condition.

    Maintenance commits (VACUUM, OPTIMIZE, table properties) are not new versions: the predicate is
    :meth:`DeltaTableHook.check_version`, the one the sensor's poke calls.

    Yields ``{"status": "success", "ref": <DeltaRef dict>}``, or ``{"status": "error", "message":
    ..., "retryable": bool}`` when the conditions are invalid (not retryable) or the table cannot be
    read (retryable). The kwargs carry a connection id, never credentials: they are stored in the
    metadata database.

    :param table_uri: local path or ``s3://`` URI of the table.
    :param min_version: fire only on a version ``>= min_version``.
    :param partition: fire only when this partition has a live file, e.g. ``{"ds": "2026-11-28"}``.
    :param newer_than: a ``DeltaRef`` dict; fire only on a newer version of the same table.
    :param aws_conn_id: Amazon provider connection for ``s3://`` tables.
    :param poll_interval: seconds between two looks at the table.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        min_version: int | None = None,
        partition: dict[str, str] | None = None,
        newer_than: dict[str, Any] | None = None,
        aws_conn_id: str | None = "aws_default",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.min_version = min_version
        self.partition = partition
        self.newer_than = newer_than
        self.aws_conn_id = aws_conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "min_version": self.min_version,
                "partition": self.partition,
                "newer_than": self.newer_than,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_dltrain.hooks.delta import DeltaTableHook

        hook = DeltaTableHook(aws_conn_id=self.aws_conn_id)
        while True:
            try:
                check = await asyncio.to_thread(
                    hook.check_version, self.table_uri, self.min_version, self.partition, self.newer_than
                )
            except DltrainUserError as err:
                yield TriggerEvent(_error(err, retryable=False))
                return
            except Exception as err:  # network, permissions: the task fails and Airflow's retries apply
                yield TriggerEvent(_error(err, retryable=True))
                return
            if check.ref is not None:
                self.log.info("%s: %s", self.table_uri, check.summary())
                yield TriggerEvent({"status": "success", "ref": check.ref.to_dict()})
                return
            self.log.info("%s: %s; next look in %ss", self.table_uri, check.summary(), self.poll_interval)
            await asyncio.sleep(self.poll_interval)


def _error(err: Exception, *, retryable: bool) -> dict[str, Any]:
    return {"status": "error", "message": f"{type(err).__name__}: {err}", "retryable": retryable}


# Seconds between handing an event to the triggerer and recording it as fired. The triggerer flushes
# yielded events to the metadata database on its next loop (about a second), while a write to the
# asset state store is immediate: recording first would lose the version if the triggerer died in
# between. Recording after this grace makes a crash re-fire the version instead (at least once).
PERSIST_GRACE = 5.0
_STATE_KEY_PREFIX = "dltrain.delta.last_fired_version"


class DeltaTableNewVersionTrigger(BaseEventTrigger):
    """Fire one asset event per newly committed data change of a Delta table, for ``AssetWatcher``.

    Commits that only maintain the table (``dltrain vacuum``'s VACUUM START/END, OPTIMIZE, table
    properties; see :func:`~airflow_provider_dltrain.lake.log.changes_data`) fire nothing: they
    leave the rows as they were, so a DAG run for them would redo the previous run's work.

    Each event's payload is ``{"table_uri", "version", "timestamp", "ref": <DeltaRef dict>,
    "latest"}`` (``latest``: the newest commit of any kind); the asset event's ``extra`` holds it
    under ``"payload"``. Versions are fired in
    order, one per look at the table, so a backlog drains one version per ``poll_interval`` and
    each version normally gets its own DAG run.

    The last version fired is kept in Airflow's asset state store (an event trigger is re-created
    from its kwargs after a triggerer restart, so it cannot live in them): a restarted triggerer
    resumes after it. A version is recorded :data:`PERSIST_GRACE` seconds after its event was
    handed to the triggerer, so a crash inside that window fires it again rather than losing it.
    Without a state store (a trigger shared by several assets) the position is kept in memory and
    a restart starts again from ``from_version``.

    :param table_uri: local path or ``s3://`` URI of the table.
    :param from_version: the first version to fire for (a maintenance commit there is skipped);
        ``None`` fires only for versions committed
        after the watcher's first look (from version 0 when the table does not exist yet).
    :param aws_conn_id: Amazon provider connection for ``s3://`` tables.
    :param poll_interval: seconds between two looks at the table.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        from_version: int | None = None,
        aws_conn_id: str | None = "aws_default",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()
        from airflow_provider_dltrain.hooks.delta import VersionConditions

        # validated here: a watcher is built while the DAG file is parsed, so errors show as import errors
        if from_version is not None and (
            isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 0
        ):
            raise InvalidSpecError(f"from_version must be an integer >= 0 or None, got {from_version!r}")
        self.table_uri = VersionConditions.parse(table_uri).table_uri
        self.from_version = from_version
        self.aws_conn_id = aws_conn_id
        self.poll_interval = float(poll_interval)
        self._memory: int | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "from_version": self.from_version,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    @property
    def state_key(self) -> str:
        """Key of the last fired version in the asset state store: the table, not the other kwargs,
        so editing ``poll_interval`` (a new trigger row) keeps the position."""
        digest = hashlib.sha256(self.table_uri.encode()).hexdigest()[:32]
        return f"{_STATE_KEY_PREFIX}:{digest}"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_dltrain.hooks.delta import DeltaTableHook

        hook = DeltaTableHook(aws_conn_id=self.aws_conn_id)
        last = await self._load()
        while True:
            try:
                if last is None:
                    last = await self._start_position(hook)
                check, ref = await asyncio.to_thread(hook.version_after, self.table_uri, last)
            except Exception as err:  # a watcher must outlive an unreadable table: look again later
                self.log.warning(
                    "%s: cannot read the table (%s: %s)", self.table_uri, type(err).__name__, err
                )
                await asyncio.sleep(self.poll_interval)
                continue
            if ref is None:
                if check.latest is not None and check.latest > last:
                    # only maintenance commits since ``last``: step over them so later looks skip them
                    last = check.latest
                    await self._save(last)
                await asyncio.sleep(self.poll_interval)
                continue
            self.log.info("%s: new data version %d (newest %s)", self.table_uri, ref.version, check.latest)
            yield TriggerEvent({**_payload(ref), "latest": check.latest})
            await asyncio.sleep(PERSIST_GRACE)
            last = ref.version
            await self._save(last)
            await asyncio.sleep(max(0.0, self.poll_interval - PERSIST_GRACE))

    async def _start_position(self, hook: Any) -> int:
        """The version before the first one to fire for, when nothing was recorded yet."""
        if self.from_version is not None:
            return self.from_version - 1
        check = await asyncio.to_thread(hook.check_version, self.table_uri)
        start = -1 if check.latest is None else check.latest
        self.log.info("%s: watching for versions after %d", self.table_uri, start)
        await self._save(start)
        return start

    def _store(self) -> Any:
        return getattr(self, "asset_state_store", None)

    async def _load(self) -> int | None:
        store = self._store()
        if store is None:
            return self._memory
        try:
            value = await store.aget(self.state_key, default=None)
        except ValueError:  # one trigger shared by several assets: no single store to use
            self.log.warning("%s: several watched assets; last fired version kept in memory", self.table_uri)
            self.asset_state_store = None
            return self._memory
        if value is None:
            return None
        self.log.info("%s: resuming after version %s (asset state store)", self.table_uri, value)
        return int(value)

    async def _save(self, version: int) -> None:
        self._memory = version
        store = self._store()
        if store is None:
            return
        with contextlib.suppress(ValueError):  # several watched assets: warned in _load
            await store.aset(self.state_key, version)


def _payload(ref: DeltaRef) -> dict[str, Any]:
    return {"table_uri": ref.uri, "version": ref.version, "timestamp": ref.timestamp, "ref": ref.to_dict()}
