"""A local nightly pipeline: land D's images into a Delta partition, pin the version for D, train,
register behind the gate, score D with the champion for D, and log the lineage."""

from datetime import datetime

from airflow.sdk import DAG, Asset
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.operators import (
    DeltaLineageOperator,
    DeltaWriteOptions,
    RegisterModelOperator,
    SparkBatchInferenceOperator,
    SparkToDeltaOperator,
    TrainModelOperator,
)
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

with DAG(
    dag_id="docs_nightly",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
):
    # --8<-- [start:ingest]
    ingest = SparkToDeltaOperator(
        task_id="ingest_images",
        table_uri="/data/lake/digits",  # or s3://bucket/lake/digits (templated)
        partition={"ds": "{{ data_interval_start | ds }}"},  # templated
        transform="my_pkg.etl:decode_digits",  # or a callable
        inputs={  # raw files, or a DeltaRef dict read at exactly that version
            "images": {
                "path": "/data/landing/{{ data_interval_start | ds }}/images",
                "format": "binaryFile",
                "options": {"pathGlobFilter": "*.png"},
            },
            "labels": {"path": "/data/landing/{{ data_interval_start | ds }}/labels.csv", "format": "csv"},
        },
        transform_params={"image_size": 8},  # third argument of the transform (templated)
        write=DeltaWriteOptions(
            max_bad_fraction=0.05, schema_mode="strict", num_files=2, partition_formats={"ds": "date"}
        ),  # ds must be YYYY-MM-DD (or a regex)
        engine="local",  # or "glue", "emr", "emr_serverless", "spark_submit" (templated)
        engine_options={},  # that engine's settings (templated); see Engines
        deferrable=False,  # True: wait for a cloud job in the triggerer
        poll_interval=15.0,  # seconds between job state checks
        aws_conn_id=None,  # an `aws` connection for s3:// tables (and cloud jobs)
        force=False,  # True: run even when the inputs are unchanged (templated)
        outlets=[Asset(name="digits", uri="file:///data/lake/digits")],
    )
    # --8<-- [end:ingest]
    # --8<-- [start:sensor]
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition",
        table_uri="/data/lake/digits",
        partition={"ds": "{{ data_interval_start | ds }}"},  # templated
        min_version=None,  # or an int
        newer_than=None,  # or a DeltaRef dict / XComArg
        pin="cutoff",  # or "partition_commit", "newest" (default)
        deferrable=True,  # wait in the triggerer
        poll_interval=60,
        timeout=6 * 3600,
        aws_conn_id=None,
    )
    # --8<-- [end:sensor]
    # --8<-- [start:train]
    trained = TrainModelOperator(
        task_id="train",
        dataset=pinned.output,  # DeltaRef dict / XComArg (templated)
        train_fn="my_pkg.model:train",  # or a callable
        hparams={"epochs": 12, "lr": 0.003, "seed": 7},  # templated; a JSON string also works
        data_filter=[["ds", "<=", "{{ data_interval_start | ds }}"]],  # pushed down to partitions (templated)
        data_cutoff="{{ data_interval_start | ds }}",
        backend="torch_distributor",  # or "ddp", "local", "horovod", "sagemaker", "ec2", "ray"
        backend_options={"num_processes": 2},
        experiment_name="digits",
        skip_if_unchanged="digits_cnn",  # skip when unchanged since the champion for the cut-off
        code_version=None,  # or e.g. "{{ var.value.model_release }}" instead of hashing the code
        non_finite="fail_at_end",  # NaN/inf metrics fail the task; or "fail_at_any_step", "allow"
        mlflow_conn_id="mlflow_default",
    )
    # --8<-- [end:train]
    # --8<-- [start:register]
    registered = RegisterModelOperator(
        task_id="register",
        train_result=trained.output,
        model_name="digits_cnn",
        metric="val_accuracy",
        mode="max",
        min_delta=0.0,
        data_cutoff="{{ data_interval_start | ds }}",
        evaluate_fn="my_pkg.model:evaluate_model",  # evaluate_model(ctx, model) -> {"val_accuracy": ...}
        # evaluation_dataset={"uri": "/data/lake/digits_holdout", "version": 3},   # optional fixed rows
        # evaluation_filter=[["ds", "<=", "2026-11-01"]],
        alias="champion",
        trigger_rule="none_failed",  # when train skipped: skip at once, not a scheduler pass later
    )
    # --8<-- [end:register]
    # --8<-- [start:score]
    scored = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": "digits_cnn", "champion_as_of": "{{ data_interval_start | ds }}"},
        input=pinned.output,
        input_filter=[["ds", "=", "{{ data_interval_start | ds }}"]],
        table_uri="/data/lake/digit_predictions",
        partition={"ds": "{{ data_interval_start | ds }}"},
        scoring={"feature_columns": ["features"], "key_columns": ["source_file"], "task": "classification"},
        trigger_rule="none_failed",  # still score when training was skipped
        allow_pickle=False,  # default: refuse models saved in PyTorch's pickle format
        engine="local",  # or "glue", "emr", "emr_serverless", "spark_submit" (templated)
        engine_options={},  # that engine's settings (templated); see Engines
        deferrable=False,
        poll_interval=15.0,
        force=False,  # True: score even when the scores are unchanged (templated)
    )
    # --8<-- [end:score]
    # --8<-- [start:lineage]
    lineage = DeltaLineageOperator(
        task_id="lineage", table_uri="/data/lake/digit_predictions", version=scored.output
    )
    # --8<-- [end:lineage]
    ingest >> pinned >> trained >> registered >> scored >> lineage
