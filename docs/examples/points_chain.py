"""A user's nightly on four engines, the lake on S3: DVC-versioned CSVs → SageMaker Processing → the
cut-off pin → two Kubeflow nodes on Docker → the gate → scoring on one EC2 instance.

With the fake AWS on the Docker bridge's gateway (docs/engines/kubeflow.md, "A lake on S3, from
Docker"): its env file is this machine's ``aws`` connection and the TrainJob's mounted secret.
"""

import os
from datetime import datetime

from airflow.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.operators import (
    RegisterModelOperator,
    SparkBatchInferenceOperator,
    SparkToDeltaOperator,
    TrainModelOperator,
)
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

LAKE = "s3://lake"
STAGING = f"{LAKE}/dltrain-staging"
DS = "{{ data_interval_start | ds }}"
# what the test points elsewhere: where the data's git repository, the nodes' image, the store's
# keys (the fake's --env-file) and the MLflow store (SQLite, mounted into the nodes) are
DATA_REPO = os.environ.get("POINTS_DATA_REPO", "https://github.com/my-org/points-data.git")
NODE_IMAGE = os.environ.get("POINTS_NODE_IMAGE", "dltrain/train-kubeflow:local")
NODE_SECRETS = os.environ.get("POINTS_NODE_SECRETS", os.path.expanduser("~/.dltrain/fake-aws.env"))
MLFLOW_DIR = os.environ.get("POINTS_MLFLOW_DIR", os.path.expanduser("~/.dltrain/mlflow"))
POLL_S = float(os.environ.get("DLTRAIN_POLL_INTERVAL", "30"))

with DAG(
    dag_id="points_chain",
    schedule=CronDataIntervalTimetable("0 2 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
):
    # --8<-- [start:chain]
    ingest = SparkToDeltaOperator(
        task_id="ingest",
        table_uri=f"{LAKE}/lake/points",
        partition={"ds": DS},
        transform="points.etl:to_features",
        inputs={
            "raw": {
                "dvc": {"repo": DATA_REPO, "path": "points.csv", "rev": "main"},  # pinned per date
                "format": "csv",
                "options": {"header": "true"},
            }
        },
        engine="sagemaker_processing",
        engine_options={
            "staging_uri": STAGING,
            "role": "arn:aws:iam::123456789012:role/DltrainProcessingJob",
            "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/dltrain-spark-processing:3.5",
        },
        aws_conn_id="aws",
        poll_interval=POLL_S,
    )
    pinned = DeltaTableVersionSensor(
        task_id="wait_for_partition",
        table_uri=f"{LAKE}/lake/points",
        partition={"ds": DS},
        pin="cutoff",
        aws_conn_id="aws",
        poll_interval=POLL_S,
    )
    trained = TrainModelOperator(
        task_id="train",
        dataset=pinned.output,
        train_fn="points.model:train",
        hparams={"epochs": 3, "seed": 7},
        data_filter=[["ds", "<=", DS]],
        data_cutoff=DS,
        backend="kubeflow",
        backend_options={
            "runtime_backend": "container",  # the SDK's Docker backend: a container per node
            "image": NODE_IMAGE,
            "num_nodes": 2,
            "staging_uri": STAGING,
            "secret_env_file": NODE_SECRETS,  # mounted read-only into every node, never its environment
            "container_mounts": [MLFLOW_DIR],  # MLflow's SQLite store and its artifacts
            "environment": {"OMP_NUM_THREADS": "1"},
        },
        experiment_name="points",
        skip_if_unchanged="points",
        aws_conn_id="aws",  # the launcher's access to the staging area and the table
        poll_interval=POLL_S,
    )
    registered = RegisterModelOperator(
        task_id="register",
        train_result=trained.output,
        model_name="points",
        metric="loss",
        mode="min",
        data_cutoff=DS,
        gate_policy={"max_value": 1.0, "min_relative_change": 0.01},  # a floor, then 1 % better
        trigger_rule="none_failed",
    )
    scored = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": "points", "champion_as_of": DS},
        input=pinned.output,
        input_filter=[["ds", "=", DS]],
        table_uri=f"{LAKE}/lake/point_predictions",
        partition={"ds": DS},
        scoring={"feature_columns": ["features"], "key_columns": ["id"], "task": "classification"},
        engine="ec2",
        engine_options={
            "staging_uri": STAGING,
            "instance_profile": "dltrain-node",  # the fake creates it; on AWS: see the EC2 page
            "max_minutes": 30,
        },
        aws_conn_id="aws",
        poll_interval=POLL_S,
        trigger_rule="none_failed",
    )
    ingest >> pinned >> trained >> registered >> scored
    # --8<-- [end:chain]
