"""``EngineJobTrigger``: wait in the triggerer for a Glue/EMR/EMR Serverless job to end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class EngineJobTrigger(BaseTrigger):
    """Fires once the job of ``handle`` is terminal, with its state and the service's reason.

    Kwargs carry the connection id and engine options (bucket, role ARN, cluster id), never
    credentials. The adapter's ``poll`` is the same call the operator's synchronous wait makes.
    A training job also names its MLflow connection (``mlflow_conn_id``): killing the deferred task
    hands the stopped job to the training launcher, which ends the job's MLflow run FAILED, as the
    operator's own ``on_kill`` does for a task that waits in its worker. (``mlflow_run_id`` names
    the run directly; triggers serialized by earlier versions carry it.)
    """

    def __init__(
        self,
        *,
        engine: str,
        handle: dict[str, Any],
        engine_options: dict[str, Any] | None = None,
        aws_conn_id: str | None = None,
        region_name: str | None = None,
        poll_interval: float = 30.0,
        mlflow_run_id: str | None = None,
        mlflow_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.handle = handle
        self.engine_options = engine_options or {}
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poll_interval = poll_interval
        self.mlflow_run_id = mlflow_run_id
        self.mlflow_conn_id = mlflow_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "engine": self.engine,
                "handle": self.handle,
                "engine_options": self.engine_options,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poll_interval": self.poll_interval,
                "mlflow_run_id": self.mlflow_run_id,
                "mlflow_conn_id": self.mlflow_conn_id,
            },
        )

    def _engine(self) -> Any:
        from airflow_provider_dltrain.hooks.engines import EngineHook

        return EngineHook(self.aws_conn_id, self.region_name).get_engine(self.engine, self.engine_options)

    def _poll(self) -> Any:
        from airflow_provider_dltrain.engines import JobHandle

        return self._engine().poll(JobHandle.from_dict(self.handle))

    def _kill(self) -> None:
        from airflow_provider_dltrain.engines import JobHandle
        from airflow_provider_dltrain.engines.lifecycle import stop_job

        engine, handle = self._engine(), JobHandle.from_dict(self.handle)
        # the MLflow run ends before teardown: the launcher reads the job's spec
        stop_job(engine, handle, logger=self.log, before_teardown=lambda: self._end_run(engine, handle))

    def _end_run(self, engine: Any, handle: Any) -> None:
        """The job is stopped: the training launcher ends its MLflow run FAILED (the job would have
        finished it)."""
        from airflow_provider_dltrain.training.remote import is_remote_backend

        if not self.mlflow_run_id and not (self.mlflow_conn_id and is_remote_backend(self.engine)):
            return  # an ETL or scoring job: no MLflow run
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.training.remote import RemoteLauncher
        from airflow_provider_dltrain.training.tracking import KILLED, end_failed

        hook = MlflowHook(mlflow_conn_id=self.mlflow_conn_id) if self.mlflow_conn_id else MlflowHook()
        config = hook.get_tracking_config()
        if self.mlflow_run_id:
            end_failed(config, self.mlflow_run_id, RuntimeError(KILLED))
        else:
            RemoteLauncher(engine, config).killed(handle)

    async def on_kill(self) -> None:
        """The deferred task was marked failed or cleared: cancel the job, remove its cluster.

        Not ``cleanup``: that also runs when a triggerer restarts, and the job must survive that.
        """
        await asyncio.to_thread(self._kill)  # stop_job logs the cancel

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                status = await asyncio.to_thread(self._poll)
            except Exception as err:
                message = f"{type(err).__name__}: {err}"
                yield TriggerEvent({"state": "ERROR", "raw": "", "message": message, "handle": self.handle})
                return
            if status.terminal:
                event = {"state": status.state, "raw": status.raw, "message": status.message}
                yield TriggerEvent({**event, "handle": self.handle})
                return
            self.log.info("%s job %s: %s", self.engine, self.handle.get("ids"), status.raw)
            await asyncio.sleep(self.poll_interval)
