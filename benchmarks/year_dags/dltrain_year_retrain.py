"""The nightly retrain DAG's shape on the simulated year's tables and model (``benchmarks.history_year``).

The same operators and settings as ``dags/dltrain_retrain.py``: pin the cut-off version of ``ds <= D``,
skip training when the champion for D (or a version already gated for D) has the same data, code and
hyper-parameters, register behind the gate, score ``ds = D`` with the champion for D (skipped when that
partition already holds those scores), the lineage of the predictions. ``bench_history`` backfills
three dates of the year with it and reads the backfill report of each.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.operators import (
    DeltaLineageOperator,
    RegisterModelOperator,
    SparkBatchInferenceOperator,
    TrainModelOperator,
)
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from benchmarks import year_model

DS = "{{ data_interval_start | ds }}"
IMAGES = paths.table("images")
PREDICTIONS = paths.table("predictions")

with DAG(
    dag_id=year_model.DAG_ID,
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2025, 12, 1),
    catchup=False,
    max_active_runs=2,
    params={"hparams": Param(year_model.HPARAMS, type="object")},
    tags=["dltrain", "benchmark"],
):
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition",
        table_uri=IMAGES,
        partition={"ds": DS},
        pin="cutoff",
        poke_interval=5,
        timeout=600,
    )
    trained = TrainModelOperator(
        task_id="train",
        dataset=pinned.output,
        train_fn=year_model.TRAIN_FN,
        hparams="{{ params.hparams | tojson }}",
        data_filter=[["ds", "<=", DS]],
        data_cutoff=DS,
        backend="local",
        experiment_name=year_model.MODEL,
        skip_if_unchanged=year_model.MODEL,
        depends_on_past=True,
        wait_for_downstream=True,
    )
    registered = RegisterModelOperator(
        task_id="register",
        train_result=trained.output,
        model_name=year_model.MODEL,
        metric=year_model.METRIC,
        mode="min",
        min_delta=0.0,
        data_cutoff=DS,
        trigger_rule="none_failed",
    )
    scored = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": year_model.MODEL, "champion_as_of": DS},
        input=pinned.output,
        input_filter=[["ds", "=", DS]],
        table_uri=PREDICTIONS,
        partition={"ds": DS},
        scoring=year_model.SCORING,
        trigger_rule="none_failed",
    )
    lineage = DeltaLineageOperator(task_id="lineage", table_uri=PREDICTIONS, version=scored.output)

    pinned >> trained >> registered >> scored >> lineage
