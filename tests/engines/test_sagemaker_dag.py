"""The unmodified retrain DAG with ``DLTRAIN_TRAIN_BACKEND=sagemaker`` through ``airflow dags test``.

The lake is on the fake AWS's S3; ETL and scoring run in local Spark; training runs as a SageMaker
training job (the fake's container runs it under the SDK's torchrun driver, 2 ranks) that logs the
model into the deployment's MLflow store, which the gate and the scoring then use. Run again with
unchanged inputs, the date submits no SageMaker job (nor any other) and starts no Spark.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import date

import pytest
from engine_helpers import aws_client, aws_connection, submitted

pytestmark = pytest.mark.slow

DAY = date(2026, 11, 24)
FAST = {"epochs": 2, "batch_size": 32, "lr": 0.003, "seed": 7}


def test_the_retrain_dag_trains_on_sagemaker_and_registers_the_jobs_model(
    aws_leak_check, tmp_path, monkeypatch
):
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags
    from airflow_provider_dltrain.demo.seed import seed

    endpoint = aws_leak_check
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", aws_connection(endpoint))
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLTRAIN_LAKE_URI", f"s3://{bucket}/lake")
    monkeypatch.setenv("DLTRAIN_AWS_CONN_ID", "aws_lake")
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND", "sagemaker")
    options = {
        "staging_uri": f"s3://{bucket}/staging",
        "role": "arn:aws:iam::123456789012:role/SageMakerRole",
        "image_uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311",
        "processes_per_host": 2,
    }
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND_OPTIONS", json.dumps(options))
    seed(paths.landing(), DAY, 1, per_day=120)
    env = airflow_env()
    ensure_airflow_db(env)
    runs = [
        ("dltrain_ingest", DAY.isoformat(), None),
        ("dltrain_retrain", DAY.isoformat(), {"hparams": FAST}),
    ]
    # the date, then the same date again with unchanged inputs, in one runner process
    outcomes = run_dags(runs + runs, env)
    bad = [o for o in outcomes if not o.ok]
    assert len(outcomes) == 4 and not bad, bad[0].tail if bad else outcomes

    jobs = aws_client("sagemaker", endpoint).list_training_jobs(NameContains="dltrain-train-")[
        "TrainingJobSummaries"
    ]
    ours = [j for j in jobs if re.fullmatch(r"dltrain-train-[0-9a-f]{16}-t\d+", j["TrainingJobName"])]
    # one training job: the first run's; the unchanged re-run submitted none
    assert [j["TrainingJobStatus"] for j in ours] == ["Completed"], ours
    assert submitted(endpoint)["sagemaker training jobs"] == 1
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=paths.mlflow_uri())
    versions = client.search_model_versions("name='dltrain_digits'")
    assert len(versions) == 1 and ours, (versions, jobs)
    run = client.get_run(versions[0].run_id)
    assert run.data.tags["dltrain.backend"] == "sagemaker" and run.info.status == "FINISHED"

    again = outcomes[2:]
    assert again[1].state["tasks"]["train"] == "skipped"
    assert again[0].state["xcom"]["ingest_images"]["skipped"] is True
    assert again[1].state["xcom"]["score"]["skipped"] is True
