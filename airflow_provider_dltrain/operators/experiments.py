"""Experiments in a DAG: expand a search into mapped training trials, then pick the best one.

::

    trials = ExpandTrialsOperator(task_id="trials", dataset=pinned.output, search={"grid": {...}},
                                  hparams={"epochs": 6}, early_stopping={"rule": "median", "metric": "val_loss"})
    trained = TrainModelOperator.partial(task_id="train", dataset=pinned.output, train_fn=...,
                                         max_active_tis_per_dagrun=2).expand_kwargs(trials.output)
    best = SelectBestTrialOperator(task_id="select_best", trial_results=trained.output, metric="val_loss")
    RegisterModelOperator(task_id="register", train_result=best.output, ...)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.operators.task_context import run_info
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

if TYPE_CHECKING:
    from airflow.sdk import Context

ABLATION_XCOM_KEY = "ablation_report"


def _json(value: Any, name: str) -> Any:
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    if isinstance(value, str):
        try:
            return json.loads(value) if value else None
        except ValueError as err:
            raise InvalidSpecError(f"{name} is text but not JSON: {value[:200]!r}") from err
    return value


class ExpandTrialsOperator(BaseOperator):
    """Turn a search spec into trials for ``TrainModelOperator.partial(...).expand_kwargs(...)``.

    Creates the search's MLflow parent run once (found again by a digest of the DAG, the data
    interval, the pinned dataset and the spec, so a re-run or retry reuses it) and returns one
    ``{"hparams": {...}, "trial": {name, index, parent_run_id, early_stopping}}`` per trial.

    :param dataset: the pinned version the trials train on, a DeltaRef dict or XComArg (templated).
    :param search: ``{"grid": {...}}``, ``{"random": {"n", "seed", "space"}}``, ``{"trials": [...]}`` or
        ``{"ablate": [component, ...]}`` (see :mod:`airflow_provider_dltrain.experiments.search_spec`) (templated).
    :param hparams: hyper-parameters every trial shares; a trial's own values win (templated).
    :param early_stopping: ``{"rule": "median" | "asha", "metric": ..., "mode": ...}`` or None (templated).
    :param experiment_name: MLflow experiment of the parent and child runs (default: the DAG id) (templated).
    :param mlflow_conn_id: ``mlflow`` connection; when missing the embedded store is used.
    """

    template_fields: Sequence[str] = ("dataset", "search", "hparams", "early_stopping", "experiment_name")
    template_fields_renderers = {
        "dataset": "json",
        "search": "json",
        "hparams": "json",
        "early_stopping": "json",
    }
    ui_color = "#fff2cc"

    def __init__(
        self,
        *,
        dataset: Any,
        search: Any,
        hparams: Any = None,
        early_stopping: Any = None,
        experiment_name: str | None = None,
        mlflow_conn_id: str = "mlflow_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dataset = dataset
        self.search = search
        self.hparams = hparams
        self.early_stopping = early_stopping
        self.experiment_name = experiment_name
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_provider_dltrain.experiments import StoppingSpec, expand_trials
        from airflow_provider_dltrain.experiments.search_runs import ensure_parent_run, search_key
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.lake.ref import DeltaRef

        info = run_info(context)
        with fail_fast_on_user_error():
            ref = DeltaRef.coerce(self.dataset)
            search, fixed = _json(self.search, "search"), _json(self.hparams, "hparams") or {}
            trials = expand_trials(search, fixed)
            raw_stopping = _json(self.early_stopping, "early_stopping")
            stopping = StoppingSpec.coerce(raw_stopping).to_dict() if raw_stopping else None
            definition = _definition(info, ref.to_dict(), search, fixed, stopping)
            key = search_key(definition)
            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
            parent, created = ensure_parent_run(
                tracking,
                self.experiment_name or str(info["dag_id"] or "dltrain"),
                key,
                run_name=f"{info['dag_id']}.search.{str(info.get('data_interval_start') or '')[:10]}",
                tags={
                    "dltrain.search": json.dumps(definition, sort_keys=True, default=str)[:5000],
                    "dltrain.dag_id": str(info["dag_id"]),
                    "dltrain.run_id": str(info["run_id"]),
                },
            )
        self.log.info(
            "%s parent MLflow run %s for %d trial(s)%s: %s",
            "Created" if created else "Reusing",
            parent,
            len(trials),
            f", early stopping {stopping['rule']} on {stopping['metric']}" if stopping else "",
            ", ".join(t.name for t in trials),
        )
        return [
            {
                "hparams": t.hparams,
                "trial": {
                    "name": t.name,
                    "index": t.index,
                    "parent_run_id": parent,
                    "early_stopping": stopping,
                },
            }
            for t in trials
        ]


def _definition(
    info: Mapping[str, Any], ref: Mapping[str, Any], search: Any, fixed: Any, stopping: Any
) -> dict[str, Any]:
    """What identifies a search: the same values find the same parent run again."""
    return {
        "dag_id": info["dag_id"],
        "task_id": info["task_id"],
        "data_interval": [str(info.get("data_interval_start")), str(info.get("data_interval_end"))],
        "dataset": dict(ref),
        "search": search,
        "hparams": fixed,
        "early_stopping": stopping,
    }


class SelectBestTrialOperator(BaseOperator):
    """Return the best trial's TrainResult (for ``RegisterModelOperator``) and report the search.

    Writes ``leaderboard.json`` (and, for an ablation, ``ablation.json`` and ``ablation.md``) on the
    parent run, tags it with the best run, ends it FINISHED, and logs the leaderboard. An ablation's
    report is also pushed to XCom under ``ablation_report``.

    :param trial_results: the mapped training task's output (one TrainResult per trial) (templated).
    :param metric: the metric to rank trials by, one every trial returns (templated).
    :param mode: ``"min"`` (lower is better) or ``"max"`` (templated).
    :param mlflow_conn_id: ``mlflow`` connection; when missing the embedded store is used.
    """

    template_fields: Sequence[str] = ("trial_results", "metric", "mode")
    ui_color = "#fff2cc"

    def __init__(
        self,
        *,
        trial_results: Any,
        metric: str,
        mode: str = "min",
        mlflow_conn_id: str = "mlflow_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.trial_results = trial_results
        self.metric = metric
        self.mode = mode
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.experiments import ablation_report, leaderboard, select_best
        from airflow_provider_dltrain.experiments.results import ablation_markdown
        from airflow_provider_dltrain.experiments.search_spec import ABLATE
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook

        with fail_fast_on_user_error():
            results = [dict(r) for r in (_json(self.trial_results, "trial_results") or []) if r]
            best = select_best(results, self.metric, self.mode)
            board = leaderboard(results, self.metric, self.mode)
            artifacts: dict[str, str] = {}
            report = None
            if any(ABLATE in (r.get("params") or {}) for r in results):
                report = ablation_report(results, self.metric, self.mode)
                artifacts = {
                    "ablation.json": json.dumps(report, indent=2),
                    "ablation.md": ablation_markdown(report),
                }
            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
            parent = _parent_of(tracking, str(best["run_id"]))
            if parent:
                from airflow_provider_dltrain.experiments.search_runs import finish_parent

                finish_parent(
                    tracking, parent, best=best, metric=self.metric, board=board, artifacts=artifacts
                )
        self._log(board, best, parent)
        if report is not None:
            self.log.info("Ablation report (%s):\n%s", self.metric, ablation_markdown(report))
            context["ti"].xcom_push(key=ABLATION_XCOM_KEY, value=report)
        return best

    def _log(self, board: Sequence[Mapping[str, Any]], best: Mapping[str, Any], parent: str | None) -> None:
        lines = [
            f"  {r['rank']:>2}. {r['trial']} {self.metric}={r[self.metric]:.4g} run {r['run_id']}"
            + (f" STOPPED EARLY at step {r['stopped_at_step']}" if r["stopped_at_step"] is not None else "")
            for r in board
        ]
        self.log.info(
            "Best of %d trials: %s (run %s); parent run %s\n%s",
            len(board),
            best.get("trial"),
            best["run_id"],
            parent,
            "\n".join(lines),
        )


def _parent_of(tracking: Any, run_id: str) -> str | None:
    from airflow_provider_dltrain.experiments.stopping import PARENT_TAG

    return tracking.client().get_run(run_id).data.tags.get(PARENT_TAG)
