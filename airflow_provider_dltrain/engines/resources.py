"""``Resource``: one live cloud resource an engine created, as the reaper sees it.

A leaf module: each adapter (``glue``, ``emr``, ``emr_serverless``, ``ec2``, ``sagemaker``) lists its
own live resources that carry a task identity (``live_resources(clients)``) and stops one
(``stop_resource(clients, resource)``); :mod:`~airflow_provider_dltrain.engines.reaper` only asks
each adapter and decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_dltrain.engines.run_spec import RunIdentity

Clients = Callable[[str], Any]


@dataclass(frozen=True)
class Resource:
    """One live cloud resource an engine created, and the task it belongs to.

    ``id`` is the cluster or instance id, ``<job name>/<job run id>``, ``<application id>/<job run
    id>`` or the training job's name.
    """

    kind: str
    id: str
    identity: RunIdentity
    state: str
    created: datetime | None = None
    ids: dict[str, str] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        who = self.identity
        task = who.task_id if who.map_index < 0 else f"{who.task_id}[{who.map_index}]"
        return f"{self.kind} {self.id} ({who.dag_id}/{who.run_id}/{task}, {self.state})"


def identity_of(tags: list[dict[str, str]] | None) -> RunIdentity | None:
    """The task identity in an AWS ``[{"Key": ..., "Value": ...}]`` tag list; ``None``: not ours."""
    return RunIdentity.from_tags({t["Key"]: t["Value"] for t in tags or []})
