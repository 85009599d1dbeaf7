"""A user's cloud DAG: a CSV on S3 into a Delta table by a Glue job, then SageMaker training on that version."""

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.operators import SparkToDeltaOperator, TrainModelOperator

LAKE = "s3://my-lake"
STAGING = f"{LAKE}/dltrain-staging"
POLL_S = float(os.environ.get("DLTRAIN_POLL_INTERVAL", "30"))  # the test sets 1

with DAG(dag_id="points_nightly", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    ingest = SparkToDeltaOperator(
        task_id="ingest",
        table_uri=f"{LAKE}/lake/points",
        partition={"ds": "{{ ds }}"},
        transform="points.etl:to_features",
        inputs={
            "raw": {
                "path": LAKE + "/landing/{{ ds }}/points.csv",
                "format": "csv",
                "options": {"header": "true"},
            }
        },
        engine="glue",
        engine_options={"staging_uri": STAGING, "role": "arn:aws:iam::123456789012:role/GlueJob"},
        aws_conn_id="aws",
        poll_interval=POLL_S,
    )
    TrainModelOperator(
        task_id="train",
        dataset=ingest.output,
        train_fn="points.model:train",
        hparams={"epochs": 1, "seed": 7},
        backend="sagemaker",
        backend_options={
            "staging_uri": STAGING,
            "role": "arn:aws:iam::123456789012:role/SageMakerJob",
            "image_uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311",
        },
        aws_conn_id="aws",
        poll_interval=POLL_S,
    )
