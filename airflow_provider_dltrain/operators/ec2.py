"""``Ec2ClusterTeardownOperator``: terminate the EC2 training cluster of a task of this DAG run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class Ec2ClusterTeardownOperator(BaseOperator):
    """Terminate every instance of ``train_task_id``'s EC2 cluster in this DAG run, whatever happened.

    The training task terminates its cluster itself (on success, failure and kill); this teardown
    task covers a worker that died before it could (``kill -9``, a lost node): it runs even when the
    training task failed, finds the instances by the task's identity tags (``dltrain:dag_id``,
    ``dltrain:run_id``, ``dltrain:task_id``), and terminates those still alive::

        train = TrainModelOperator(task_id="train", backend="ec2", backend_options={...})
        train >> Ec2ClusterTeardownOperator(task_id="ec2_teardown", train_task_id="train").as_teardown(
            setups=train
        )

    :param train_task_id: the task whose cluster to terminate (templated).
    :param aws_conn_id: ``aws`` connection of the account that runs the cluster (templated).
    :param region_name: overrides the connection's region.
    :return: the ids of the instances it terminated.
    """

    template_fields: Sequence[str] = ("train_task_id", "aws_conn_id")
    ui_color = "#f4d9d0"

    def __init__(
        self,
        *,
        train_task_id: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.train_task_id = train_task_id
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> list[str]:
        from airflow_provider_dltrain.engines.ec2_instances import terminate_tagged
        from airflow_provider_dltrain.hooks.engines import EngineHook
        from airflow_provider_dltrain.operators.task_context import run_info

        info = run_info(context)
        tags = {
            "dltrain:dag_id": str(info["dag_id"]),
            "dltrain:run_id": str(info["run_id"]),
            "dltrain:task_id": self.train_task_id,
        }
        ec2 = EngineHook(self.aws_conn_id, self.region_name).client("ec2")
        ids = terminate_tagged(ec2, tags)
        if ids:
            self.log.info("terminated %s instance(s) of %s: %s", len(ids), self.train_task_id, ids)
        else:
            self.log.info("no live instance of %s in run %s", self.train_task_id, info["run_id"])
        return ids
