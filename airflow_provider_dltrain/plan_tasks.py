"""One task of a DAG for one date, decided as the task itself would decide when the run starts.

Each decision calls the method the operator's own ``execute`` (or the sensor's ``poke``) decides with:
:meth:`DeltaTableVersionSensor.look`, :meth:`SparkToDeltaOperator.rerun_check`,
:meth:`TrainModelOperator.training_check` and :meth:`SparkBatchInferenceOperator.rerun_check`; never a
copy of their rules. They read the tables' history index, the recorded facts and the registry's tags:
no Spark session, no job, no model load. The task is a copy rendered for the date (its templates with
the date's data interval and the DAG's params; an upstream task's return value is the one this plan
predicts for it).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: What a task will do: ``skip`` (hands back what holds the answer), ``run`` (computes), ``reads`` (a
#: sensor pins a version), ``wait`` (its input is not there yet), ``depends`` (decided by an upstream
#: task's outcome), ``always`` (a task this plan does not decide for), ``error`` (it would fail).
DECISIONS = ("skip", "run", "reads", "wait", "depends", "always", "error")


@dataclass
class TaskPlan:
    """What one task will do for the date, why, and against which earlier write or model version."""

    task_id: str
    stage: str  # pin | etl | train | register | score | other
    decision: str
    reason: str
    changes: list[dict[str, Any]] = field(default_factory=list)  # {"fact", "before", "after"}
    since: dict[str, Any] | None = None  # the write or model version it is compared with
    output: Any = None  # its predicted return value (what downstream templates receive)
    cost: dict[str, int] = field(default_factory=dict)  # trainings, cloud_jobs, spark_stages

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "stage": self.stage,
            "decision": self.decision,
            "reason": self.reason,
            "changes": list(self.changes),
            "since": self.since,
            "cost": dict(self.cost),
        }


class PlanTaskInstance:
    """The ``ti`` a rendered template sees: ``xcom_pull`` answers with the plan's predicted outputs."""

    def __init__(self, dag_id: str, run_id: str, task_id: str, outputs: Mapping[str, Any]) -> None:
        self.dag_id, self.run_id, self.task_id = dag_id, run_id, task_id
        self.try_number, self.map_index = 1, -1
        self._outputs = outputs

    def xcom_pull(
        self, task_ids: Any = None, key: str = "return_value", default: Any = None, **_: Any
    ) -> Any:
        if key != "return_value":
            return default
        return self._outputs.get(str(task_ids), default)

    def get_relevant_upstream_map_indexes(self, **_: Any) -> None:
        return None


#: The rendered copies' logger: a task's own INFO lines ("pinned ... to version N", "model ... resolved
#: to ...") would be printed once per date and task (730 lines, about half the time of a year's plan);
#: warnings still reach the log (set this logger's level to INFO to see the rest).
QUIET = logging.getLogger(__name__)
QUIET.setLevel(logging.WARNING)


def rendered(task: Any, context: dict[str, Any], outputs: Mapping[str, Any], env: Any = None) -> Any:
    """A copy of ``task`` whose templated fields are rendered for ``context`` (the DAG's task is untouched).

    :param env: the DAG's Jinja environment, built once for a whole plan (default: the task's own).
    """
    ti = PlanTaskInstance(context["dag_id"], context["run_id"], task.task_id, outputs)
    mine = copy.copy(task)
    mine._cached_logger = mine._log = QUIET  # what the task logs when it runs is not news in a plan
    mine.render_template_fields({**context, "ti": ti, "task_instance": ti, "task": mine}, jinja_env=env)
    return mine, {**context, "ti": ti, "task_instance": ti, "task": mine}


def stage_of(task: Any) -> str:
    """``pin``, ``etl``, ``train``, ``register``, ``score`` for the provider's stages, else ``other``."""
    kind: Any = type(task)
    return _stage_of_class(kind)


@functools.cache
def _stage_of_class(kind: Any) -> str:
    from airflow_provider_dltrain.operators import (
        RegisterModelOperator,
        SparkBatchInferenceOperator,
        SparkToDeltaOperator,
        TrainModelOperator,
    )
    from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

    kinds = (
        (DeltaTableVersionSensor, "pin"),
        (SparkToDeltaOperator, "etl"),
        (TrainModelOperator, "train"),
        (RegisterModelOperator, "register"),
        (SparkBatchInferenceOperator, "score"),
    )
    return next((name for base, name in kinds if issubclass(kind, base)), "other")


def decide(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan], env: Any = None) -> TaskPlan:
    """The plan of ``task`` for the date of ``context``, given the plans of the tasks before it."""
    stage = stage_of(task)
    if stage == "other":
        return TaskPlan(task.task_id, stage, "always", f"{type(task).__name__}: runs on every run")
    waiting = [done[t] for t in sorted(task.upstream_task_ids) if t in done]
    if any(p.decision in ("wait", "error") for p in waiting):
        return TaskPlan(task.task_id, stage, "wait", "an upstream task cannot run yet")
    outputs = {p.task_id: p.output for p in done.values() if p.output is not None}
    try:
        mine, ctx = rendered(task, context, outputs, env)
        return _DECIDERS[stage](mine, ctx, done)
    except Exception as err:  # the run would fail the same way: say so, for this date only
        return TaskPlan(task.task_id, stage, "error", f"{type(err).__name__}: {err}")


def _pin(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan]) -> TaskPlan:
    check, pinned = task.look()
    if pinned is None:
        return TaskPlan(task.task_id, "pin", "wait", f"{task.table_uri}: {check.summary()}")
    why = f"pins {pinned['uri']} version {pinned['version']} ({check.summary()})"
    return TaskPlan(task.task_id, "pin", "reads", why, output=pinned)


def _needs(task: Any, done: Mapping[str, TaskPlan], stage: str) -> TaskPlan | None:
    """``depends`` when an upstream task will compute a value this task reads (not known before)."""
    computing = [p.task_id for p in done.values() if p.task_id in task.upstream_task_ids and p.output is None]
    computing = [t for t in computing if done[t].decision == "run" and done[t].stage in ("etl", "train")]
    if not computing:
        return None
    return TaskPlan(
        task.task_id,
        stage,
        "depends",
        f"decided once {', '.join(computing)} has run",
        cost=_cost(task, stage),
    )


def _etl(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan]) -> TaskPlan:
    waiting = _needs(task, done, "etl")
    if waiting is not None:
        return waiting
    check = task.rerun_check(task.run_spec(context))
    return _from_rerun(task, "etl", check)


def _score(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan]) -> TaskPlan:
    waiting = _needs(task, done, "score")
    if waiting is not None:
        return waiting
    check, chosen, _, _ = task.rerun_check()
    plan = _from_rerun(task, "score", check)
    plan.since = {**(plan.since or {}), "model": chosen.to_dict()}
    trained = [p.task_id for p in done.values() if p.stage == "train" and p.decision == "run"]
    if trained and plan.decision == "skip":
        plan.decision = "depends"
        plan.reason = (
            f"computes if the gate makes the model {', '.join(trained)} trains the champion for this date; "
            f"otherwise skips: {plan.reason}"
        )
        plan.cost = _cost(task, "score")
    return plan


def _from_rerun(task: Any, stage: str, check: Any) -> TaskPlan:
    if check.result is not None:
        return TaskPlan(task.task_id, stage, "skip", check.reason, since=check.since, output=check.result)
    changes = [
        {"fact": name, "before": _at(check.recorded, name), "after": _at(check.facts, name)}
        for name in (check.changed.split(",") if check.recorded is not None else [])
        if name
    ]
    return TaskPlan(
        task.task_id, stage, "run", check.reason, changes, since=check.since, cost=_cost(task, stage)
    )


def _at(facts: Mapping[str, Any] | None, name: str) -> Any:
    """A recorded fact by its name in ``changed`` (``inputs.<input>`` for one input of an ETL run)."""
    value: Any = facts or {}
    for part in name.split(".", 1):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _train(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan]) -> TaskPlan:
    from airflow_provider_dltrain.hooks.mlflow import MlflowHook
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.operators.training import _hparams
    from airflow_provider_dltrain.training.skip_check import WORDS
    from airflow_provider_dltrain.utils.snapshot import remembered

    waiting = _needs(task, done, "train")
    if waiting is not None:
        return waiting
    if not task.skip_if_unchanged:
        return TaskPlan(
            task.task_id,
            "train",
            "run",
            "trains on every run (no skip_if_unchanged)",
            cost=_cost(task, "train"),
        )
    ref = DeltaRef.coerce(task.dataset)
    conn_id = task.mlflow_conn_id
    tracking = remembered(
        ("tracking", conn_id), lambda: MlflowHook(mlflow_conn_id=conn_id).get_tracking_config()
    )
    check = task.training_check(tracking, ref, _hparams(task.hparams), task._storage_options(ref.uri))
    since = {"model": str(task.skip_if_unchanged), "version": check.champion, "cutoff": check.cutoff}
    if check.skip_reason is not None:
        return TaskPlan(task.task_id, "train", "skip", check.skip_reason, since=since)
    changes = [
        {"fact": WORDS.get(t, t), "before": check.before[t], "after": check.after[t]} for t in check.changed
    ]
    reason = f"trains: {check.note}"
    return TaskPlan(task.task_id, "train", "run", reason, changes, since=since, cost=_cost(task, "train"))


def _register(task: Any, context: dict[str, Any], done: Mapping[str, TaskPlan]) -> TaskPlan:
    trains = [p for p in done.values() if p.stage == "train" and p.task_id in task.upstream_task_ids]
    if trains and all(p.decision == "skip" for p in trains):
        return TaskPlan(task.task_id, "register", "skip", "nothing to register: training skips")
    return TaskPlan(task.task_id, "register", "run", "the gate decides whether the new model is champion")


_DECIDERS = {"pin": _pin, "etl": _etl, "train": _train, "register": _register, "score": _score}


def _cost(task: Any, stage: str) -> dict[str, int]:
    """What a task that computes starts: a training, a cloud job, a Spark stage."""
    from airflow_provider_dltrain.training.request import is_remote_backend

    if stage == "train":
        return {"trainings": 1, "cloud_jobs": int(is_remote_backend(task.backend))}
    engine = str(getattr(task, "engine", "local"))
    return {"spark_stages": 1, "cloud_jobs": int(engine != "local")}
