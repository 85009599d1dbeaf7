"""Nightly retraining that a backfill reproduces: data cut at D, pinned version, champion for D.

For the run covering [D, D+1):
1. wait until the ``digits`` table holds partition ``ds = D`` and pin the newest version that changed
   any partition at or before D (later partitions never move it; a restated earlier one does);
2. skip training when the content of ``ds <= D``, the training code and the hyper-parameters are
   unchanged since the model that is champion for D (the reason is logged); otherwise train on
   ``ds <= D`` with 2 DDP processes, or where ``DLTRAIN_TRAIN_BACKEND``/``_OPTIONS`` say (``horovod``,
   ``sagemaker``, ``ec2``);
3. register the model behind the gate: the champion for D and the new model are both scored on the
   new model's validation rows (``val_accuracy``, higher is better) — a backfill of an old date
   never moves the live ``champion`` alias;
4. score D's images with the champion for D into the ``digit_predictions`` partition ``ds = D``
   (unless that partition already holds the scores of this model version for this input version:
   then no model is loaded and no Spark started; trigger with ``{"force": true}`` to score anyway);
5. log and return the lineage of the predictions.

Two runs may be active at once (a backfill from the UI runs dates side by side): waiting for the
partition, scoring and lineage overlap, but ``train`` waits until the previous date's ``train`` and
``register`` are done (``depends_on_past`` + ``wait_for_downstream``), so every date's training decision
and gate see the champion the dates before it left, as one nightly after the other would. A failed
day therefore holds the next day's training until it is fixed, re-run or marked done.

Hyper-parameters are a DAG param: trigger with ``{"hparams": {...}}`` to change them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.operators import (
    DeltaLineageOperator,
    RegisterModelOperator,
    SparkBatchInferenceOperator,
    TrainModelOperator,
)
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

DS = "{{ data_interval_start | ds }}"
MODEL = "dltrain_digits"
DIGITS = paths.table("digits")
PREDICTIONS = paths.table("digit_predictions")
HPARAMS = {"epochs": 12, "batch_size": 32, "lr": 0.003, "seed": 7}
# seconds between status checks of the sensor, the cloud training job and the scoring job
POLL = paths.poll_intervals(sensor=60.0, train=30.0, score=15.0)

with DAG(
    dag_id="dltrain_retrain",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=2,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={
        "hparams": Param(HPARAMS, type="object", description="hyper-parameters of the digits CNN"),
        "force": Param(False, type="boolean", description="score even when the scores are unchanged"),
    },
    tags=["dltrain", "training"],
    doc_md=__doc__,
):
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition",
        table_uri=DIGITS,
        partition={"ds": DS},
        pin="cutoff",
        aws_conn_id=paths.aws_conn_id(),
        poke_interval=POLL["sensor"],
        timeout=6 * 3600,
        mode="reschedule",
    )
    trained = TrainModelOperator(
        task_id="train",
        dataset=pinned.output,
        train_fn="airflow_provider_dltrain.demo.digits_model:train",
        hparams="{{ params.hparams | tojson }}",
        data_filter=[["ds", "<=", DS]],
        data_cutoff=DS,
        backend=paths.train_backend(),
        backend_options=paths.train_backend_options(),
        poll_interval=POLL["train"],
        experiment_name=MODEL,
        skip_if_unchanged=MODEL,
        aws_conn_id=paths.aws_conn_id(),
        # dates train and register in date order, also when runs overlap (see above)
        depends_on_past=True,
        wait_for_downstream=True,
    )
    registered = RegisterModelOperator(
        task_id="register",
        train_result=trained.output,
        model_name=MODEL,
        metric="val_accuracy",
        mode="max",
        min_delta=0.0,
        data_cutoff=DS,
        evaluate_fn="airflow_provider_dltrain.demo.digits_model:evaluate_model",
        trigger_rule="none_failed",  # skips itself when train skipped, at once rather than a pass later
        aws_conn_id=paths.aws_conn_id(),
    )
    scored = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": MODEL, "champion_as_of": DS},
        input=pinned.output,
        input_filter=[["ds", "=", DS]],
        table_uri=PREDICTIONS,
        partition={"ds": DS},
        scoring={
            "feature_columns": ["features"],
            "key_columns": ["source_file", "label"],
            "partition_formats": {"ds": "date"},
        },
        trigger_rule="none_failed",
        outlets=[Asset(name="dltrain_digit_predictions", uri=paths.asset_uri(PREDICTIONS))],
        engine=paths.engine(),
        engine_options=paths.engine_options(),
        poll_interval=POLL["score"],
        aws_conn_id=paths.aws_conn_id(),
        force="{{ params.force }}",
    )
    lineage = DeltaLineageOperator(
        task_id="lineage", table_uri=PREDICTIONS, version=scored.output, aws_conn_id=paths.aws_conn_id()
    )

    pinned >> trained >> registered >> scored >> lineage
