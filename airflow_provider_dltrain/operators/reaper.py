"""``DltrainReapOperator``: stop the cloud jobs and clusters whose Airflow task no longer runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines.reaper import IsTaskRunning


def task_states_lookup(ti: Any) -> IsTaskRunning:
    """``is_task_running`` answered by the Task SDK (``ti.get_task_states``), one call per DAG run.

    A task has no database access in Airflow 3; the execution API serves task states to a running task.
    """
    from airflow_provider_dltrain.engines.reaper import running_by_task_states

    def fetch(dag_id: str, run_id: str) -> Mapping[str, Any]:
        states = ti.get_task_states(dag_id=dag_id, run_ids=[run_id])
        return dict(states.get(run_id) or {})

    return running_by_task_states(fetch)


class DltrainReapOperator(BaseOperator):
    """Terminate, stop or cancel every dltrain cloud resource whose Airflow task is no longer running.

    Transient EMR clusters, Glue job runs and EMR Serverless job runs created by the ``engine=`` of the
    ETL and scoring operators carry their task's identity; a resource is reaped when that task is in
    no running state (running, queued, scheduled, deferred, up_for_retry, up_for_reschedule,
    restarting) — a task whose worker died without running ``on_kill``. Resources without dltrain
    tags are never touched. Use it as a teardown (``DltrainReapOperator(...).as_teardown()``) or in
    a scheduled maintenance DAG.

    :param aws_conn_id: ``aws`` connection whose account and region are swept (templated).
    :param older_than: reap only resources created longer ago than this: a ``timedelta`` or a text
        like ``"2h"`` / ``"30m"`` (templated); default: any age.
    :param dry_run: list what would be reaped, touch nothing.
    :param region_name: overrides the connection's region.
    :param kubeflow_namespace: also reap the running Kubeflow TrainJobs of ``backend="kubeflow"`` in
        this namespace (the worker's kube-config or in-cluster service account; templated).
    :return: the reaped resources as a list of dicts (``kind``, ``id``, ``dag_id``, ``run_id``,
        ``task_id``, ``map_index``, ``state``, ``created``, ``action``, ``reason``).
    """

    template_fields: Sequence[str] = ("aws_conn_id", "older_than", "kubeflow_namespace")
    ui_color = "#f4d9d0"

    def __init__(
        self,
        *,
        aws_conn_id: str | None = "aws_default",
        older_than: timedelta | str | None = None,
        dry_run: bool = False,
        region_name: str | None = None,
        kubeflow_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self.older_than = older_than
        self.report_only = dry_run  # not self.dry_run: BaseOperator.dry_run() is a method
        self.region_name = region_name
        self.kubeflow_namespace = kubeflow_namespace

    def _older_than(self) -> timedelta | None:
        from airflow_provider_dltrain.engines.reaper import parse_duration

        if self.older_than in (None, ""):
            return None
        if isinstance(self.older_than, timedelta):
            return self.older_than
        return parse_duration(str(self.older_than))

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_provider_dltrain.engines.reaper import reap
        from airflow_provider_dltrain.exceptions import ReapFailedError
        from airflow_provider_dltrain.hooks.engines import EngineHook

        with fail_fast_on_user_error():
            older_than = self._older_than()
        hook = EngineHook(self.aws_conn_id, region_name=self.region_name)
        trainjobs = None
        if self.kubeflow_namespace:
            from airflow_provider_dltrain.engines.kubeflow_reaper import trainer_client

            trainjobs = trainer_client(self.kubeflow_namespace)
        outcomes = reap(
            hook.client,
            task_states_lookup(context["ti"]),
            dry_run=self.report_only,
            older_than=older_than,
            trainjobs=trainjobs,
        )
        failed = [o for o in outcomes if o.action == "failed"]
        if failed:
            listing = "; ".join(f"{o.resource.describe()}: {o.reason}" for o in failed)
            raise ReapFailedError(
                f"{len(failed)} leaked resource(s) could not be stopped: {listing}. Stop them in the "
                "console or fix the connection's permissions; the next run retries them."
            )
        reaped = [o.to_dict() for o in outcomes if o.reaped]
        self.log.info("%s %d resource(s)", "would reap" if self.report_only else "reaped", len(reaped))
        return reaped
