"""A grid search with asynchronous early stopping, and an adaptive Optuna search, on the same train(ctx)."""

from datetime import datetime

from airflow.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.operators import (
    ExpandTrialsOperator,
    RegisterModelOperator,
    SelectBestTrialOperator,
    TrainModelOperator,
)
from airflow_provider_dltrain.operators.experiments import TrainTrialOperator
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

DS = "{{ data_interval_start | ds }}"

with DAG(
    dag_id="digits_search",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
):
    # --8<-- [start:search]
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition",
        table_uri="/data/lake/digits",
        partition={"ds": DS},
        pin="cutoff",
        mode="reschedule",
    )
    trials = ExpandTrialsOperator(
        task_id="trials",
        dataset=pinned.output,
        search={"grid": {"lr": [0.01, 0.003, 0.001, 1e-5, 3e-6, 1e-6]}},
        hparams={"epochs": 4, "batch_size": 32, "seed": 7},  # shared by every trial
        early_stopping={
            "rule": "median",
            "metric": "val_loss",
            "mode": "min",
            "grace_steps": 1,
            "min_trials": 2,
        },
        experiment_name="digits_search",
    )
    trained = TrainModelOperator.partial(
        task_id="train",
        dataset=pinned.output,
        train_fn="airflow_provider_dltrain.demo.digits_model:train",
        data_filter=[["ds", "<=", DS]],
        experiment_name="digits_search",
        max_active_tis_per_dagrun=2,  # at most 2 trials at once in a run; add pool=... across runs
    ).expand_kwargs(trials.output)  # one task per trial: {"hparams": ..., "trial": ...}
    best = SelectBestTrialOperator(
        task_id="select_best", trial_results=trained.output, metric="val_loss", mode="min"
    )
    registered = RegisterModelOperator(  # the gate still decides whether the best trial is promoted
        task_id="register",
        train_result=best.output,
        model_name="digits_search",
        metric="val_loss",
        mode="min",
        data_cutoff=DS,
        evaluate_fn="airflow_provider_dltrain.demo.digits_model:evaluate_model",
    )
    pinned >> trials >> trained >> best >> registered
    # --8<-- [end:search]


with DAG(
    dag_id="digits_optuna",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
):
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition", table_uri="/data/lake/digits", partition={"ds": DS}, pin="cutoff"
    )
    # --8<-- [start:optuna]
    trials = ExpandTrialsOperator(
        task_id="trials",
        dataset=pinned.output,
        search={
            "optuna": {
                "n_trials": 12,
                "metric": "val_loss",
                "mode": "min",
                "seed": 7,
                "space": {"lr": {"loguniform": [1e-6, 3e-2]}, "batch_size": {"choice": [32, 64]}},
                "sampler": {"name": "tpe", "constant_liar": True, "n_startup_trials": 4},
                "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 1},
                # "storage": "conn:optuna_db",  # an Airflow connection; default: optuna.db beside a SQLite MLflow store
            }
        },
        hparams={"epochs": 4, "seed": 7},
        early_stopping=None,  # the pruner is the study's
    )
    trained = TrainTrialOperator.partial(
        task_id="train", dataset=pinned.output, train_fn="my_pkg.model:train", max_active_tis_per_dagrun=2
    ).expand_kwargs(trials.output)
    # --8<-- [end:optuna]
