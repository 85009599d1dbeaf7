"""Experiments in a DAG: expand a search into mapped training trials, then pick the best one.

::

    trials = ExpandTrialsOperator(task_id="trials", dataset=pinned.output, search={"grid": {...}},
                                  hparams={"epochs": 6}, early_stopping={"rule": "median", "metric": "val_loss"})
    trained = TrainModelOperator.partial(task_id="train", dataset=pinned.output, train_fn=...,
                                         max_active_tis_per_dagrun=2).expand_kwargs(trials.output)
    best = SelectBestTrialOperator(task_id="select_best", trial_results=trained.output, metric="val_loss")
    RegisterModelOperator(task_id="register", train_result=best.output, ...)

An adaptive search (``search={"optuna": {...}}``) maps :class:`TrainTrialOperator` instead: each
mapped task asks the Optuna study for its parameters when it starts and tells it the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.operators.task_context import run_info
from airflow_provider_dltrain.operators.training import TrainModelOperator, _hparams, _trial
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
        ``{"ablate": [component, ...]}`` (see :mod:`airflow_provider_dltrain.experiments.search_spec`), or
        ``{"optuna": {"n_trials", "metric", "space", "sampler", "pruner", ...}}`` (see
        :class:`~airflow_provider_dltrain.experiments.optuna_study.OptunaSearch`; map
        :class:`TrainTrialOperator`): the study's finished trials by parameters, then slots that ask
        the study when their task starts (templated).
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
            if isinstance(search, Mapping) and "optuna" in search:
                return self._expand_study(info, ref.to_dict(), search, fixed)
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

    def _expand_study(
        self, info: Mapping[str, Any], ref: Mapping[str, Any], search: Mapping[str, Any], fixed: Any
    ) -> list[dict[str, Any]]:
        """The entries of an Optuna search: the study's trials by parameters, then slots to ask."""
        from airflow_provider_dltrain.exceptions import InvalidSpecError
        from airflow_provider_dltrain.experiments.optuna_study import (
            OptunaSearch,
            open_study,
            plan_trials,
            redacted_storage,
        )
        from airflow_provider_dltrain.experiments.search_runs import ensure_parent_run, search_key
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook

        if set(search) != {"optuna"} or _json(self.early_stopping, "early_stopping"):
            raise InvalidSpecError(
                "an Optuna search takes its pruner in search.optuna.pruner; set early_stopping=None and "
                "give no other search kind beside 'optuna'"
            )
        study = OptunaSearch.coerce(search["optuna"])
        tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
        storage = study.storage or _default_storage(tracking.tracking_uri)
        # without n_trials: asking for more trials continues the same study and parent run
        definition = _definition(info, ref, {"optuna": study.identity()}, fixed, None)
        key = search_key(definition)
        # the tag is shown to anyone who reads the run: the storage URL without user part or query
        public = {**study.identity(), "storage": redacted_storage(study.storage)}
        shown = _definition(info, ref, {"optuna": public}, fixed, None)
        name = f"dltrain-{key[:20]}"
        parent, created = ensure_parent_run(
            tracking,
            self.experiment_name or str(info["dag_id"] or "dltrain"),
            key,
            run_name=f"{info['dag_id']}.study.{str(info.get('data_interval_start') or '')[:10]}",
            tags={"dltrain.search": json.dumps(shown, default=str)[:5000], "dltrain.optuna_study": name},
        )
        run_key = str(info["run_id"])
        planned = plan_trials(open_study(study, storage_url(storage), name), study, run_key)
        known = sum(1 for p in planned if p.params is not None)
        self.log.info(
            "%s parent MLflow run %s; Optuna study %r in %s: %d trial(s) known by parameters, %d to ask "
            "(sampler %s, pruner %s)",
            "Created" if created else "Reusing",
            parent,
            name,
            storage.split("://")[0],
            known,
            len(planned) - known,
            study.sampler["name"],
            study.pruner["name"],
        )
        early = study.stopping(storage, name)
        optuna = {"storage": storage, "study": name, "search": study.to_dict(), "run_key": run_key}
        return [
            {
                "hparams": {**dict(fixed), **(p.params or {})},
                "trial": {
                    "name": p.name,
                    "index": i,
                    "parent_run_id": parent,
                    "early_stopping": early,
                    "optuna": {**optuna, "slot": p.slot, "params": p.params},
                },
            }
            for i, p in enumerate(planned)
        ]


def storage_url(storage: str) -> str:
    """The study's SQLAlchemy URL: ``"conn:<conn_id>"`` resolved from that Airflow connection."""
    from airflow_provider_dltrain.experiments.optuna_study import CONN_PREFIX

    if not storage.startswith(CONN_PREFIX):
        return storage
    from airflow.sdk import BaseHook

    uri = BaseHook.get_connection(storage[len(CONN_PREFIX) :]).get_uri()
    return "postgresql://" + uri[len("postgres://") :] if uri.startswith("postgres://") else uri


def _default_storage(tracking_uri: str | None) -> str:
    """A SQLite study file beside a SQLite MLflow store; any other store needs search.optuna.storage."""
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    uri = tracking_uri or ""
    if uri.startswith("sqlite:///") and "/" in uri[len("sqlite:///") :]:
        return uri.rsplit("/", 1)[0] + "/optuna.db"
    raise InvalidSpecError(
        f"search.optuna.storage is not set and MLflow ({uri.split('://')[0]}) is not a SQLite file to put "
        "the study beside: give an SQLAlchemy URL every worker reaches, e.g. 'postgresql://.../optuna'"
    )


class TrainTrialOperator(TrainModelOperator):
    """A search trial: ``TrainModelOperator``, plus the Optuna ask/tell of an adaptive search.

    For a trial of ``search={"optuna": ...}`` it asks the study for the parameters when the task
    starts (a retry resumes the trial its slot asked; known parameters reuse their study trial),
    trains with the study's pruner judging each logged step, and tells the study the outcome
    (COMPLETE, PRUNED, or FAIL when the task fails). A trial whose inputs are unchanged returns its
    earlier result, as every search trial does. Any other trial runs exactly as
    ``TrainModelOperator``; map it with ``.partial(...).expand_kwargs(trials.output)``.
    """

    def execute(self, context: Context) -> dict[str, Any]:
        trial = _trial(self.trial) if self.trial else None
        if not trial or not trial.get("optuna"):
            return super().execute(context)
        from airflow_provider_dltrain.airflow_compat import AirflowSkipException
        from airflow_provider_dltrain.experiments import optuna_study

        with fail_fast_on_user_error():
            spec = trial["optuna"]
            search = optuna_study.OptunaSearch.coerce(spec["search"])
            storage = storage_url(str(spec["storage"]))  # resolved here: never in XCom or the UI
            study = optuna_study.open_study(search, storage, spec["study"])
            number, params, finished = optuna_study.claim_trial(
                study, search, str(spec["run_key"]), slot=spec.get("slot"), params=spec.get("params")
            )
            stopping = trial.get("early_stopping")
            stopping = {**stopping, "storage": storage} if stopping else None
            self.hparams = {**_hparams(self.hparams), **params}
            self.trial = {
                **trial,
                "name": optuna_study.trial_name(params),
                "early_stopping": {**stopping, "trial_number": number} if stopping and not finished else None,
            }
        self.log.info("Optuna trial %d of study %r: %s", number, spec["study"], params)
        try:
            result = super().execute(context)
        except AirflowSkipException:
            raise
        except BaseException:
            optuna_study.fail_trial(study, number)
            raise
        state = optuna_study.finish_trial(study, number, result, search.metric)
        self.log.info(
            "Optuna trial %d is %s (%s=%s)",
            number,
            state,
            search.metric,
            (result or {}).get("metrics", {}).get(search.metric),
        )
        return result


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
