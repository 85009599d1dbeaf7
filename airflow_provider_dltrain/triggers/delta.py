"""Deferrable wait for a Delta table version: the triggerer polls the table's log asynchronously."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_dltrain.exceptions import DltrainUserError


class DeltaTableVersionTrigger(BaseTrigger):
    """Fire once the newest version of a Delta table meets every condition.

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
