"""Hyper-parameter search and ablation of the digits CNN, as parallel trials with early stopping.

``dltrain_search``, for the run covering [D, D+1):
1. pin the ``digits`` version for ``ds <= D`` (as the nightly retrain does);
2. expand the search into trials and create the search's MLflow parent run (once: a re-run reuses it);
3. train every trial as a mapped ``TrainModelOperator`` task, at most 2 at once, each a child run of
   the parent; the median rule stops trials whose validation loss lags the others at the same epoch;
   a re-run with unchanged data, code and hyper-parameters reuses each trial's run instead of training;
4. select the best trial (lowest ``val_loss``), write the leaderboard on the parent run;
5. register it behind the gate (``dltrain_digits_search``), which still decides on promotion.

An adaptive search runs through the same DAG: trigger it with ``{"search": TPE, "early_stopping":
null}`` (``TPE``, from ``airflow_provider_dltrain.demo.search_settings``, which the search
benchmark measures too: an Optuna study, TPE with ``constant_liar``, the median pruner, 12 trials, 2
at a time). Each mapped task asks the study for its parameters when it starts, so later trials learn
from earlier ones; the pruner stops trials that lag at the same epoch; the study lives in
``optuna.db`` beside the MLflow store, so a re-run of an unchanged study finds every trial by its
parameters and trains nothing::

    airflow dags trigger dltrain_search --conf "$(python -c 'import json, dltrain_search as d;
        print(json.dumps({"search": d.TPE, "early_stopping": None}))')"

``dltrain_ablation`` trains the baseline and one trial without each model component (``conv1``,
``conv2``, ``pool``, ``hidden``) and reports each component's effect on ``val_loss``.

The training function is the nightly retrain's, unchanged: ``airflow_provider_dltrain.demo.digits_model:train``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.demo.search_settings import (  # noqa: F401 (TPE: the docstring's trigger)
    ABLATION,
    FIXED,
    PARALLEL_TRIALS,
    SEARCH,
    STOPPING,
    TPE,
)
from airflow_provider_dltrain.operators import (
    ExpandTrialsOperator,
    RegisterModelOperator,
    SelectBestTrialOperator,
)
from airflow_provider_dltrain.operators.experiments import TrainTrialOperator
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

DS = "{{ data_interval_start | ds }}"
TRAIN_FN = "airflow_provider_dltrain.demo.digits_model:train"
DIGITS = paths.table("digits")


def _pin(task_id: str = "wait_for_partition") -> DeltaTableVersionSensor:
    return DeltaTableVersionSensor(
        task_id=task_id,
        table_uri=DIGITS,
        partition={"ds": DS},
        pin="cutoff",
        aws_conn_id=paths.aws_conn_id(),
        poke_interval=60,
        timeout=6 * 3600,
        mode="reschedule",
    )


def _trials(pinned: DeltaTableVersionSensor, experiment: str) -> tuple[ExpandTrialsOperator, Any]:
    """The expansion task and the mapped training task, at most 2 trials at once per DAG run."""
    trials = ExpandTrialsOperator(
        task_id="trials",
        dataset=pinned.output,
        search="{{ params.search | tojson }}",
        hparams="{{ params.hparams | tojson }}",
        early_stopping="{{ params.early_stopping | tojson }}",
        experiment_name=experiment,
    )
    trained = TrainTrialOperator.partial(
        task_id="train",
        dataset=pinned.output,
        train_fn=TRAIN_FN,
        data_filter=[["ds", "<=", DS]],
        data_cutoff=DS,
        backend="local",
        experiment_name=experiment,
        aws_conn_id=paths.aws_conn_id(),
        max_active_tis_per_dagrun=PARALLEL_TRIALS,
    ).expand_kwargs(trials.output)
    return trials, trained


with DAG(
    dag_id="dltrain_search",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "search": Param(SEARCH, type="object", description="grid / random / trials / optuna spec"),
        "hparams": Param(FIXED, type="object", description="hyper-parameters every trial shares"),
        "early_stopping": Param(
            STOPPING, type=["object", "null"], description="median or asha rule (null for optuna)"
        ),
    },
    tags=["dltrain", "training", "experiments"],
    doc_md=__doc__,
):
    pinned = _pin()
    trials, trained = _trials(pinned, "dltrain_digits_search")
    best = SelectBestTrialOperator(
        task_id="select_best", trial_results=trained.output, metric="val_loss", mode="min"
    )
    registered = RegisterModelOperator(
        task_id="register",
        train_result=best.output,
        model_name="dltrain_digits_search",
        metric="val_loss",
        mode="min",
        data_cutoff=DS,
        evaluate_fn="airflow_provider_dltrain.demo.digits_model:evaluate_model",
        aws_conn_id=paths.aws_conn_id(),
    )
    pinned >> trials >> trained >> best >> registered

with DAG(
    dag_id="dltrain_ablation",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "search": Param(ABLATION, type="object", description="components to leave out one at a time"),
        "hparams": Param({**FIXED, "epochs": 3, "lr": 0.003}, type="object"),
        "early_stopping": Param(None, type=["object", "null"]),
    },
    tags=["dltrain", "training", "experiments"],
    doc_md=__doc__,
):
    pinned = _pin()
    trials, trained = _trials(pinned, "dltrain_digits_ablation")
    report = SelectBestTrialOperator(
        task_id="report", trial_results=trained.output, metric="val_loss", mode="min"
    )
    pinned >> trials >> trained >> report
