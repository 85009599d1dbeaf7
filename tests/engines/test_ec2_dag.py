"""The unmodified ingest and retrain DAGs with training on a per-run EC2 cluster (``DLTRAIN_TRAIN_BACKEND=ec2``).

ETL and scoring run on the fake Glue; training runs as two "instances" whose user data the fake AWS
boots locally: torchrun over loopback, 2 nodes x 1 process, reading the pinned Delta version from
the fake S3 and logging the model into the MLflow run the launcher opened. The model is registered,
and no instance is left running (``aws_leak_check``).
"""

from __future__ import annotations

import json
import uuid
from datetime import date

import pytest
from engine_helpers import aws_client

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

DAY = date(2026, 11, 24)
DS = DAY.isoformat()
FAST = {"epochs": 2, "batch_size": 32, "lr": 0.003, "seed": 7}


@pytest.mark.timeout(1800)  # ingest + training + scoring: three Spark/torch job starts
def test_retrain_dag_trains_on_an_ec2_cluster_registers_the_model_and_leaves_no_instance(
    aws_leak_check, tmp_path, monkeypatch
):
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags
    from airflow_provider_dltrain.demo.seed import seed
    from airflow_provider_dltrain.registry.config import default_tracking_uri

    endpoint = aws_leak_check
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    staging = f"s3://{bucket}/staging"
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", json.dumps(conn))
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLTRAIN_LAKE_URI", f"s3://{bucket}/lake")
    monkeypatch.setenv("DLTRAIN_AWS_CONN_ID", "aws_lake")
    monkeypatch.setenv("DLTRAIN_ENGINE", "glue")
    glue = {"staging_uri": staging, "role": "arn:aws:iam::123456789012:role/GlueRole"}
    monkeypatch.setenv("DLTRAIN_ENGINE_OPTIONS", json.dumps(glue))
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND", "ec2")
    ec2 = {
        "staging_uri": staging,
        "instance_count": 2,
        "image_id": "ami-0abcdef1234567890",
        "max_minutes": 30,
    }
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND_OPTIONS", json.dumps(ec2))

    seed(paths.landing(), DAY, 1, per_day=120)
    env = airflow_env()
    ensure_airflow_db(env)
    runs = [("dltrain_ingest", DS, None), ("dltrain_retrain", DS, {"hparams": FAST})]
    outcomes = run_dags(runs, env)
    bad = [o for o in outcomes if not o.ok]
    assert len(outcomes) == 2 and not bad, bad[0].tail if bad else outcomes

    instances = aws_client("ec2", endpoint).describe_instances()["Reservations"]
    ours = [i for r in instances for i in r["Instances"] if any(t["Key"] == "dltrain:job" for t in i["Tags"])]
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in ours]
    assert sorted(t["dltrain:node_rank"] for t in tags if t["dltrain:dag_id"] == "dltrain_retrain") == [
        "0",
        "1",
    ]
    assert {i["State"]["Name"] for i in ours} == {"terminated"}

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=default_tracking_uri())
    versions = client.search_model_versions("name='dltrain_digits'")
    assert len(versions) == 1
    run = client.get_run(versions[0].run_id)
    assert run.info.status == "FINISHED" and run.data.params.get("world_size", "2") == "2"
    assert "val_accuracy" in run.data.metrics
