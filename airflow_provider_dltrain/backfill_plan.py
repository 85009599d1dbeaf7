"""The plan of a backfill before it runs: per date, will it skip, recompute (and why), wait or is it busy?

``dltrain backfill-report DAG START END --plan`` and the plugin's plan page read :func:`plan_backfill`.
Every task of the DAG is rendered for the date and decided by the very method its ``execute`` decides
with (:mod:`~airflow_provider_dltrain.plan_tasks`); the date's verdict:

- **will skip**: every stage hands back what already holds the date's answer (unchanged since the
  version and run named);
- **will recompute**: a stage computes, and each says which facts changed (a partition's content
  digest, the code, the hyper-parameters, a DVC revision, the model that is champion for the date),
  with the recorded value before and the value now;
- **missing**: an input the DAG waits for is not there (the run would wait in its sensor);
- **failed** / **in progress**: the date's newest run failed (a backfill with *Missing and Errored
  Runs* re-runs it: the tasks say what that re-run does) / is queued or running now.

Totals are what a user pays for: trainings, cloud jobs and Spark stages. Nothing here writes, starts
Spark, submits a job or loads a model.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from airflow_provider_dltrain.plan_tasks import TaskPlan, decide

VERDICTS = ("will skip", "will recompute", "missing", "failed", "in progress")
COSTS = ("trainings", "cloud_jobs", "spark_stages")


@dataclass
class DatePlan:
    """What a backfill of ``ds`` will do, task by task."""

    dag_id: str
    ds: str
    verdict: str
    tasks: list[TaskPlan] = field(default_factory=list)
    run: dict[str, Any] | None = None  # the date's newest run: run_id, state (None: no run yet)

    @property
    def reasons(self) -> list[str]:
        """One line per task that computes, waits or fails: why."""
        return [
            f"{t.task_id}: {t.reason}"
            for t in self.tasks
            if t.decision in ("run", "depends", "wait", "error")
        ]

    @property
    def cost(self) -> dict[str, int]:
        return {k: sum(t.cost.get(k, 0) for t in self.tasks) for k in COSTS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "ds": self.ds,
            "verdict": self.verdict,
            "run": self.run,
            "reasons": self.reasons,
            "cost": self.cost,
            "tasks": [t.to_dict() for t in self.tasks],
        }


@dataclass
class BackfillPlan:
    dag_id: str
    dates: list[DatePlan]

    @property
    def totals(self) -> dict[str, int]:
        out = {k: sum(d.cost[k] for d in self.dates) for k in COSTS}
        for verdict in VERDICTS:
            out[verdict] = sum(1 for d in self.dates if d.verdict == verdict)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "dates": [d.to_dict() for d in self.dates], "totals": self.totals}


def plan_backfill(
    dag: Any,
    start: date,
    end: date,
    *,
    runs: Mapping[str, list[dict[str, Any]]] | None = None,
    conf: Mapping[str, Any] | None = None,
) -> BackfillPlan:
    """The plan of every date in [start, end] for ``dag`` (a parsed DAG: its real operators).

    :param runs: the DAG's runs per date as :func:`~airflow_provider_dltrain.backfill_runs.run_outcomes`
        gives them (None: as if none ran yet); only the newest run's state is read.
    :param conf: the backfill's run configuration (overrides the DAG's params, as Airflow does).
    """
    from airflow_provider_dltrain.utils.snapshot import snapshot

    order, env = _ordered(dag), _template_env(dag)
    params = {**_params(dag), **dict(conf or {})}  # validated once, not once per date
    days = [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]
    # one registry search per question and one read of each table's history for the whole range
    with snapshot(wide=len(days) > WIDE_DATES), _settled_heap():
        dates = [plan_date(dag, ds, (runs or {}).get(ds), params, order, env) for ds in days]
    return BackfillPlan(dag.dag_id, dates)


#: From how many dates a plan asks the registry for every version of a model once instead of a
#: search per month of the range (a quarter: 6 month searches cost about what one of a year's costs).
WIDE_DATES = 92


@contextlib.contextmanager
def _settled_heap() -> Iterator[None]:
    """The objects that exist before the plan (a host process's: the API server's, a DAG parser's,
    hundreds of thousands) are left out of the garbage collections the plan's own allocations
    trigger (``gc.freeze``), and given back after: nothing made before the plan becomes garbage
    because of it, and one full collection of them cost 0.3 s of a year's 2.4 s plan."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def plan_date(
    dag: Any,
    ds: str,
    runs: list[dict[str, Any]] | None = None,
    params: Mapping[str, Any] | None = None,
    order: list[Any] | None = None,
    env: Any = None,
) -> DatePlan:
    """The plan of one date: each task decided in dependency order (see the module).

    :param params: the run's params (default: the DAG's); :func:`plan_backfill` resolves them once.
    """
    context = run_context(dag, ds, params)
    done: dict[str, TaskPlan] = {}
    for task in order or _ordered(dag):
        done[task.task_id] = decide(task, context, done, env)
    newest = runs[-1] if runs else None
    run = {"run_id": newest.get("run_id"), "state": _state(newest)} if newest else None
    return DatePlan(dag.dag_id, ds, _verdict(list(done.values()), run), list(done.values()), run)


def _state(run: Mapping[str, Any]) -> str:
    return str(run.get("state") or "none").rsplit(".", 1)[-1].lower()


def _verdict(tasks: list[TaskPlan], run: Mapping[str, Any] | None) -> str:
    if run is not None and run["state"] in ("queued", "running"):
        return "in progress"
    if any(t.decision == "wait" for t in tasks):
        return "missing"
    if run is not None and run["state"] == "failed":
        return "failed"
    if any(t.decision in ("run", "depends", "error") for t in tasks):
        return "will recompute"
    return "will skip"


def _template_env(dag: Any) -> Any:
    """The DAG's Jinja environment, each template string compiled once for the whole plan (Airflow
    compiles every string of every templated field each time it renders)."""
    import functools

    env = dag.get_template_env()
    env.from_string = functools.lru_cache(maxsize=4096)(env.from_string)
    return env


def _ordered(dag: Any) -> list[Any]:
    """The DAG's tasks, each after its upstream tasks (ties by task id, so the order is stable)."""
    left = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    order: list[Any] = []
    while left:
        ready = sorted(t for t, ups in left.items() if not ups & set(left))
        if not ready:  # a cycle cannot be parsed by Airflow; guard anyway
            ready = sorted(left)
        for task_id in ready:
            order.append(dag.get_task(task_id))
            del left[task_id]
    return order


def _params(dag: Any) -> dict[str, Any]:
    return {key: dag.params[key] for key in dag.params}


def run_context(dag: Any, ds: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a template of the run for ``ds`` sees: the data interval [ds, next), ``params`` (default:
    the DAG's), ids."""
    start = datetime.fromisoformat(ds).replace(tzinfo=timezone.utc)
    end = _interval_end(dag, start)
    params = dict(params) if params is not None else _params(dag)
    return {
        "dag": dag,
        "dag_id": dag.dag_id,
        "run_id": f"plan__{start.isoformat()}",
        "logical_date": start,
        "data_interval_start": start,
        "data_interval_end": end,
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": start.isoformat(),
        "params": params,
    }


def _interval_end(dag: Any, start: datetime) -> datetime:
    """The end of the data interval that starts at ``start`` (the timetable's next point; a day if none)."""
    following = getattr(dag.timetable, "_get_next", None)
    try:
        end = following(start) if following is not None else None
    except Exception:  # a timetable of another shape: a daily interval, as the report assumes
        end = None
    return end if isinstance(end, datetime) and end > start else start + timedelta(days=1)


def format_plan(plan: BackfillPlan) -> str:
    """The plan as text: a line per date, an indented line per reason, then the totals."""
    if not plan.dates:
        return "no dates"
    lines = [f"backfill plan of {plan.dag_id}, {plan.dates[0].ds} to {plan.dates[-1].ds}:"]
    for d in plan.dates:
        run = f" (newest run {d.run['run_id']}: {d.run['state']})" if d.run else " (no run yet)"
        lines.append(f"{d.ds}  {d.verdict}{run}")
        if d.verdict == "will skip":
            lines += [
                f"    {t.task_id}: {t.reason}"
                for t in d.tasks
                if t.decision == "skip" and t.stage != "register"
            ]
        lines += [f"    {reason}" for reason in d.reasons]
        for t in d.tasks:
            lines += [f"      {c['fact']}: {_short(c['before'])} → {_short(c['after'])}" for c in t.changes]
    totals = plan.totals
    lines.append(
        "total: "
        + ", ".join(f"{totals[v]} {v}" for v in VERDICTS if totals[v])
        + f"; {totals['trainings']} training(s), {totals['cloud_jobs']} cloud job(s), "
        + f"{totals['spark_stages']} Spark stage(s)"
    )
    return "\n".join(lines)


def _short(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
