"""Each service's job in the environment that service gives it (the images of ``docker/images.py``).

Glue: the Glue-like image (Spark 3.5, Java 17, Glue 5's own modules) pip-installs the run's
``--additional-python-modules`` and runs the job script. EMR Serverless: the EMR-like image has no
Python package at all; the job's come from the venv-pack archive of ``venv_archive_uri``. SageMaker:
the job's ``TrainingImage`` runs its ``ContainerEntrypoint`` with ``/opt/ml`` as SageMaker lays it
out; a processing job's ``ImageUri`` runs it with ``/opt/ml/processing``. For each, a job that has what it imports succeeds, and one that lacks a module fails the task
with the module's name, as it would on AWS.
"""

from __future__ import annotations

import json
import uuid
from unittest import mock

import pytest
from engine_helpers import aws_client, aws_connection

from airflow_provider_dltrain.lake.storage import s3_storage_options

pytestmark = [pytest.mark.slow, pytest.mark.containers]
CONN, MLFLOW_CONN = "aws_ctr", "mlflow_ctr"
DAY = "2026-11-28"


def _context(task_id):
    ti = mock.MagicMock(
        dag_id="ctr_dag",
        run_id=f"manual__{uuid.uuid4().hex[:8]}",
        task_id=task_id,
        try_number=1,
        map_index=-1,
    )
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id="ctr_dag"),
        "run_id": ti.run_id,
        "logical_date": None,
        "outlet_events": {},
    }


@pytest.fixture
def cloud(containers_aws, monkeypatch):
    endpoint = containers_aws.endpoint_url
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", aws_connection(endpoint))
    bucket = f"ctr-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3", endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="landing/raw.csv", Body=b"id,x\n1,1.5\n2,2.5\n3,-1\n")
    key, secret = containers_aws.credentials
    storage = s3_storage_options(access_key=key, secret_key=secret, region="us-east-1", endpoint_url=endpoint)
    yield {"endpoint": endpoint, "bucket": bucket, "storage": storage, "s3": s3}


@pytest.fixture
def emr_app(cloud):
    es = aws_client("emr-serverless", cloud["endpoint"])
    app = es.create_application(name="dltrain", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]
    yield app
    es.stop_application(applicationId=app)
    es.delete_application(applicationId=app)


def _etl(cloud, engine, options, table):
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    bucket = cloud["bucket"]
    return SparkToDeltaOperator(
        task_id=f"ingest_{engine}",
        table_uri=f"s3://{bucket}/lake/{table}",
        partition={"ds": DAY},
        transform="etl_jobs:double",
        inputs={
            "raw": {"path": f"s3://{bucket}/landing/raw.csv", "format": "csv", "options": {"header": "true"}}
        },
        engine=engine,
        engine_options={"staging_uri": f"s3://{bucket}/staging", **options},
        aws_conn_id=CONN,
        poll_interval=0.5,
    )


def _rows(cloud, table):
    from deltalake import DeltaTable

    dt = DeltaTable(f"s3://{cloud['bucket']}/lake/{table}", storage_options=cloud["storage"])
    return sorted(map(tuple, dt.to_pandas()[["id", "x2", "ds"]].itertuples(index=False)))


def _no_table(cloud, table):
    listed = cloud["s3"].list_objects_v2(Bucket=cloud["bucket"], Prefix=f"lake/{table}/_delta_log/")
    return not listed.get("KeyCount")


EXPECTED = [(1, 3.0, DAY), (2, 5.0, DAY), (3, -2.0, DAY)]
GLUE_ROLE = {"role": "arn:aws:iam::123456789012:role/GlueRole"}


def test_a_glue_job_installs_its_additional_modules_at_start_and_commits(cloud):
    op = _etl(cloud, "glue", GLUE_ROLE, "glue_ok")
    ref = op.execute(_context(op.task_id))
    assert ref["version"] == 0 and _rows(cloud, "glue_ok") == EXPECTED


def test_a_glue_job_without_deltalake_in_its_modules_fails_naming_it(cloud):
    from airflow_provider_dltrain.engines import JobFailedError

    op = _etl(cloud, "glue", {**GLUE_ROLE, "additional_python_modules": ["tenacity>=9"]}, "glue_bad")
    with pytest.raises(JobFailedError, match="No module named 'deltalake'"):
        op.execute(_context(op.task_id))
    assert _no_table(cloud, "glue_bad")


def test_a_sagemaker_processing_job_whose_image_lacks_deltalake_fails_naming_it(cloud, images):
    """The Glue-like image stands for a SageMaker Spark processing image: Spark 3.5 and boto3, pyarrow,
    but no deltalake (the fake mounts a stand-in for its ``smspark-submit``)."""
    from airflow_provider_dltrain.engines import JobFailedError

    options = {"role": "arn:aws:iam::123456789012:role/SageMakerProcessingRole", "image_uri": images["glue"]}
    op = _etl(cloud, "sagemaker_processing", options, "processing_bad")
    with pytest.raises(JobFailedError, match="No module named 'deltalake'"):
        op.execute(_context(op.task_id))
    assert _no_table(cloud, "processing_bad")


def _archive(cloud, path):
    key = f"archives/{path.name}"
    cloud["s3"].upload_file(str(path), cloud["bucket"], key)
    return f"s3://{cloud['bucket']}/{key}"


def _es_options(emr_app, archive_uri):
    return {
        "application_id": emr_app,
        "execution_role_arn": "arn:aws:iam::123456789012:role/EmrServerlessRole",
        "venv_archive_uri": archive_uri,
    }


def test_an_emr_serverless_job_runs_on_its_venv_archive_and_commits(cloud, emr_app, venv_archives):
    op = _etl(cloud, "emr_serverless", _es_options(emr_app, _archive(cloud, venv_archives["full"])), "es_ok")
    ref = op.execute(_context(op.task_id))
    assert ref["version"] == 0 and _rows(cloud, "es_ok") == EXPECTED


def test_an_emr_serverless_archive_without_deltalake_fails_naming_it(cloud, emr_app, venv_archives):
    from airflow_provider_dltrain.engines import JobFailedError

    archive = _archive(cloud, venv_archives["no_deltalake"])
    op = _etl(cloud, "emr_serverless", _es_options(emr_app, archive), "es_bad")
    with pytest.raises(JobFailedError, match="No module named 'deltalake'"):
        op.execute(_context(op.task_id))
    assert _no_table(cloud, "es_bad")


@pytest.fixture
def sm(cloud, monkeypatch, tmp_path):
    from sm_train_fns import digits_partition

    from airflow_provider_dltrain import lake

    ref = lake.overwrite_partition(
        f"s3://{cloud['bucket']}/lake/digits",
        digits_partition(0, 16),
        {"ds": DAY},
        storage_options=cloud["storage"],
    )
    db = tmp_path / "mlflow.db"  # under the pytest base directory, which every job container mounts
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{MLFLOW_CONN.upper()}", json.dumps({"conn_type": "mlflow", "host": f"sqlite:///{db}"})
    )
    return {"ref": ref.to_dict(), "mlflow_uri": f"sqlite:///{db}"}


def _train(cloud, sm, image):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    return TrainModelOperator(
        task_id="train_sm",
        dataset=sm["ref"],
        train_fn="sm_train_fns:demo_train",
        hparams={"epochs": 2, "batch_size": 16, "seed": 3},
        backend="sagemaker",
        backend_options={
            "staging_uri": f"s3://{cloud['bucket']}/staging",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "image_uri": image,
            "instance_type": "ml.m5.xlarge",
            "processes_per_host": 2,
        },
        mlflow_conn_id=MLFLOW_CONN,
        aws_conn_id=CONN,
        poll_interval=0.5,
    )


def test_a_sagemaker_job_trains_two_ranks_in_the_training_image(cloud, sm, images):
    from mlflow import MlflowClient

    op = _train(cloud, sm, images["train"])
    result = op.execute(_context(op.task_id))
    assert result["world_size"] == 2 and result["model_uri"].startswith("models:/")
    run = MlflowClient(tracking_uri=sm["mlflow_uri"]).get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    assert {"train_loss", "val_loss", "val_accuracy"} <= set(run.data.metrics)
    assert run.data.tags["dltrain.backend"] == "sagemaker" and run.data.tags["dltrain.world_size"] == "2"


def test_a_sagemaker_image_without_torch_fails_the_task_naming_it(cloud, sm, images):
    from airflow_provider_dltrain.exceptions import TrainingFailedError

    op = _train(cloud, sm, images["glue"])  # Spark and pandas, no torch
    with pytest.raises(TrainingFailedError, match="No module named 'torch'"):
        op.execute(_context(op.task_id))
