"""Find the cloud resources our engines left alive, and stop those whose Airflow task no longer runs.

A worker that dies (OOM, lost node, ``kill -9``) never runs ``on_kill`` or ``teardown``, so a transient
EMR cluster, a Glue job run, an EMR Serverless job run, a SageMaker training job or the instances of
an EC2 cluster, or a SageMaker processing job, can outlive its task and keep billing. Every
such resource carries the identity of its task (tags, or Glue run arguments); :func:`reap` asks a
caller-supplied ``is_task_running`` whether that task still runs and stops the rest. Resources without
our tags are never touched. No Airflow here: the operator asks the Task SDK, the CLI the metadata DB.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import Any

from airflow_provider_dltrain.engines import (
    ec2_instances,
    emr,
    emr_serverless,
    glue,
    kubeflow_reaper,
    sagemaker,
    sagemaker_processing,
)
from airflow_provider_dltrain.engines.resources import Clients, Resource
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.exceptions import InvalidSpecError

log = logging.getLogger(__name__)

# Each adapter lists its own live resources and stops one: RESOURCE_KIND, STOP_VERB,
# live_resources(clients), stop_resource(clients, resource).
ADAPTERS: tuple[ModuleType, ...] = (emr, glue, emr_serverless, ec2_instances, sagemaker, sagemaker_processing)
_BY_KIND = {adapter.RESOURCE_KIND: adapter for adapter in ADAPTERS}
EMR_CLUSTER, GLUE_JOB_RUN = emr.RESOURCE_KIND, glue.RESOURCE_KIND
EMR_SERVERLESS_JOB_RUN, EC2_INSTANCE = emr_serverless.RESOURCE_KIND, ec2_instances.RESOURCE_KIND
SAGEMAKER_TRAINING_JOB = sagemaker.RESOURCE_KIND
SAGEMAKER_PROCESSING_JOB = sagemaker_processing.RESOURCE_KIND
# Airflow task-instance states in which a task may still own (or re-attach to) its cloud job.
LIVE_TASK_STATES = frozenset(
    {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
)
VERBS = {adapter.RESOURCE_KIND: adapter.STOP_VERB for adapter in (*ADAPTERS, kubeflow_reaper)}
DONE = {"terminate": "terminated", "stop": "stopped", "cancel": "cancelled"}

IsTaskRunning = Callable[[RunIdentity], bool]
__all__ = ["Clients", "IsTaskRunning", "Outcome", "Resource", "find_resources", "reap"]


@dataclass(frozen=True)
class Outcome:
    """What :func:`reap` did with one resource.

    ``action``: ``terminated`` / ``stopped`` / ``cancelled``; ``would terminate`` (…) on a dry run;
    ``kept`` (``reason`` says why) or ``failed`` (``reason`` is the service's error).
    """

    resource: Resource
    action: str
    reason: str = ""

    @property
    def reaped(self) -> bool:
        return self.action in DONE.values() or self.action.startswith("would ")

    def to_dict(self) -> dict[str, Any]:
        res, who = self.resource, self.resource.identity
        return {
            "kind": res.kind,
            "id": res.id,
            "dag_id": who.dag_id,
            "run_id": who.run_id,
            "task_id": who.task_id,
            "map_index": who.map_index,
            "state": res.state,
            "created": res.created.isoformat() if res.created else None,
            "action": self.action,
            "reason": self.reason,
        }


def find_resources(clients: Clients, trainjobs: Any = None) -> list[Resource]:
    """Every live resource carrying our identity tags, as each adapter lists its own: EMR clusters,
    Glue and EMR Serverless job runs, EC2 instances, SageMaker training and processing jobs; with
    ``trainjobs`` (a Kubeflow ``TrainerClient``), the running TrainJobs of its namespace too."""
    found = [res for adapter in ADAPTERS for res in adapter.live_resources(clients)]
    if trainjobs is not None:
        found.extend(kubeflow_reaper.live_resources(trainjobs))
    return found


def reap(
    clients: Clients,
    is_task_running: IsTaskRunning,
    *,
    dry_run: bool = False,
    older_than: timedelta | None = None,
    trainjobs: Any = None,
) -> list[Outcome]:
    """Stop every resource of ours whose task no longer runs (and, if given, older than ``older_than``).

    Every task is looked up before anything is stopped, so a failing lookup stops nothing. One
    resource that cannot be stopped is reported as ``failed`` and does not stop the others.
    """
    now = datetime.now(timezone.utc)
    decided = [
        (res, _keep_reason(res, is_task_running, older_than, now))
        for res in find_resources(clients, trainjobs)
    ]
    outcomes = []
    for res, keep in decided:
        if keep:
            log.info("kept %s: %s", res.describe(), keep)
            outcomes.append(Outcome(res, "kept", keep))
            continue
        verb = VERBS[res.kind]
        if dry_run:
            log.info("dry run: would %s %s", verb, res.describe())
            outcomes.append(Outcome(res, f"would {verb}", "task not running"))
            continue
        try:
            if res.kind == kubeflow_reaper.RESOURCE_KIND:
                kubeflow_reaper.stop_resource(trainjobs, res)
            else:
                _stop(clients, res)
        except Exception as err:  # one protected cluster must not leave the others running
            log.warning("could not %s %s: %s", verb, res.describe(), err)
            outcomes.append(Outcome(res, "failed", f"{type(err).__name__}: {err}"))
            continue
        log.info("%s %s: its task is not running", DONE[verb], res.describe())
        outcomes.append(Outcome(res, DONE[verb], "task not running"))
    return outcomes


def _keep_reason(
    res: Resource, is_task_running: IsTaskRunning, older_than: timedelta | None, now: datetime
) -> str:
    if older_than is not None and res.created is not None and now - _aware(res.created) < older_than:
        return f"younger than {older_than}"
    if is_task_running(res.identity):
        return "task running"
    return ""


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _stop(clients: Clients, res: Resource) -> None:
    _BY_KIND[res.kind].stop_resource(clients, res)


def running_by_task_states(fetch: Callable[[str, str], Mapping[str, Any]]) -> IsTaskRunning:
    """``is_task_running`` from ``fetch(dag_id, run_id)``: one lookup per DAG run, cached.

    ``fetch`` returns ``{task_id: state}``, mapped task instances as ``{f"{task_id}_{map_index}": state}``
    (the shape of Airflow's ``get_task_states``). A task it does not list is not running.
    """
    cache: dict[tuple[str, str], Mapping[str, Any]] = {}

    def is_task_running(identity: RunIdentity) -> bool:
        key = (identity.dag_id, identity.run_id)
        if key not in cache:
            cache[key] = fetch(*key)
        name = identity.task_id if identity.map_index < 0 else f"{identity.task_id}_{identity.map_index}"
        state = cache[key].get(name)
        return str(getattr(state, "value", state) or "").lower() in LIVE_TASK_STATES

    return is_task_running


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` (a bare number is seconds)."""
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", cleaned):
        return timedelta(seconds=float(cleaned))
    parts = _DURATION.findall(cleaned)
    if not cleaned or "".join(n + u for n, u in parts) != cleaned:
        raise InvalidSpecError(f"duration {text!r} is not like 90s, 30m, 2h, 1d or 1h30m")
    return sum((timedelta(**{_UNITS[unit]: float(n)}) for n, unit in parts), timedelta())
