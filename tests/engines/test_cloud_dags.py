"""The unmodified ingest and retrain DAGs with their Spark stages on Glue, EMR and EMR Serverless.

Every table lives on the fake AWS's S3; ETL and scoring run as cloud jobs (Amazon provider hooks →
moto → the local executor → the job script → Delta on S3), and training runs on a per-run EC2
cluster (``DLTRAIN_TRAIN_BACKEND=ec2``): two "instances" whose user data the fake AWS boots
locally, torchrun over loopback (2 nodes x 1 process) reading the pinned Delta version from the
fake S3 and logging the model into the MLflow run the launcher opened. The nightly for D runs on
Glue; re-run with unchanged inputs it submits nothing at all (no Glue, EMR, EMR Serverless or
SageMaker job, no instance); forced (``{"force": true}``) on EMR Serverless it gives the same
answer: no new commit, nothing trained, identical predictions. No instance, cluster or job is left
running. (EMR runs the same job script through a step on a transient cluster:
``test_cloud_operators.py`` covers its commit, re-attach, kill and deferral. The re-run's skips are
decided before any backend is asked, so they hold for SageMaker as for EC2; SageMaker training inside
a DAG run is ``tests/testing/test_user_cloud_dag.py``, and every SageMaker path of the operator is
``test_sagemaker_training.py``.)
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import date

import pytest
from engine_helpers import aws_client, submitted

from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for

pytestmark = pytest.mark.slow

DAY = date(2026, 11, 24)
DS = DAY.isoformat()
FAST = {"epochs": 3, "batch_size": 32, "lr": 0.003, "seed": 7}


@pytest.fixture
def lake_on_s3(aws_leak_check, tmp_path, monkeypatch):
    endpoint = aws_leak_check
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    es = aws_client("emr-serverless", endpoint)
    app = es.create_application(name="dltrain", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]
    conn = json.loads(connection_json(endpoint))  # the fake's per-start keys
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", json.dumps(conn))
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLTRAIN_LAKE_URI", f"s3://{bucket}/lake")
    monkeypatch.setenv("DLTRAIN_AWS_CONN_ID", "aws_lake")
    staging = f"s3://{bucket}/staging"
    options = {
        "glue": {"staging_uri": staging, "role": "arn:aws:iam::123456789012:role/GlueRole"},
        "emr": {
            "staging_uri": staging,
            "job_flow": {
                "ReleaseLabel": "emr-7.5.0",
                "Instances": {"InstanceCount": 1, "MasterInstanceType": "m5.xlarge"},
                "JobFlowRole": "EMR_EC2_DefaultRole",
                "ServiceRole": "EMR_DefaultRole",
            },
        },
        "emr_serverless": {
            "staging_uri": staging,
            "application_id": app,
            "execution_role_arn": "arn:aws:iam::123456789012:role/EmrServerlessRole",
        },
    }
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND", "ec2")
    ec2 = {
        "staging_uri": staging,
        "instance_count": 2,
        "image_id": "ami-0abcdef1234567890",
        "max_minutes": 30,
    }
    monkeypatch.setenv("DLTRAIN_TRAIN_BACKEND_OPTIONS", json.dumps(ec2))
    yield {"endpoint": endpoint, "bucket": bucket, "options": options}
    es.stop_application(applicationId=app)
    es.delete_application(applicationId=app)


def _run(monkeypatch, engine, options, runs):
    from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags

    monkeypatch.setenv("DLTRAIN_ENGINE", engine)
    monkeypatch.setenv("DLTRAIN_ENGINE_OPTIONS", json.dumps(options[engine]))
    env = airflow_env()
    ensure_airflow_db(env)
    outcomes = run_dags(runs, env)
    bad = [o for o in outcomes if not o.ok]
    assert len(outcomes) == len(runs) and not bad, bad[0].tail if bad else outcomes
    return outcomes


def _predictions(uri, storage):
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=storage)
    rows = table.to_pyarrow_table().to_pylist()
    return table.version(), sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _job_count(endpoint, bucket):
    s3 = aws_client("s3", endpoint)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="staging/runs/").get("Contents", [])]
    return sum(k.endswith("/result.json") for k in keys)


def test_nightly_on_glue_then_the_same_date_on_emr_serverless_gives_the_same_answer(lake_on_s3, monkeypatch):
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.seed import seed
    from airflow_provider_dltrain.lake.storage import s3_storage_options

    seed(paths.landing(), DAY, 1, per_day=120)
    key, secret = credentials_for(lake_on_s3["endpoint"])
    storage = s3_storage_options(
        access_key=key, secret_key=secret, region="us-east-1", endpoint_url=lake_on_s3["endpoint"]
    )
    options = lake_on_s3["options"]
    runs = [("dltrain_ingest", DS, None), ("dltrain_retrain", DS, {"hparams": FAST})]
    # the worker's fake AWS outlives a test: count what this test submits, not what others left
    before = submitted(lake_on_s3["endpoint"])

    # the nightly, then the same date again with unchanged inputs, in one runner process: the re-run
    # decides from the facts recorded in the partitions' commits and submits nothing
    outcomes = _run(monkeypatch, "glue", options, runs + runs)
    digits, predictions = paths.table("digits"), paths.table("digit_predictions")
    assert digits.startswith("s3://") and predictions.startswith("s3://")
    version, rows = _predictions(predictions, storage)
    assert version == 0 and len(rows) > 100
    # one ingest, one training, one scoring job: the nightly's only
    assert _job_count(lake_on_s3["endpoint"], lake_on_s3["bucket"]) == 3
    assert _since(before, submitted(lake_on_s3["endpoint"])) == {
        "glue job runs": 2,
        "emr clusters": 0,
        "emr steps": 0,
        "emr serverless job runs": 0,
        "sagemaker training jobs": 0,
        "sagemaker processing jobs": 0,
        "ec2 instances": 2,
    }
    _assert_trained_on_two_terminated_instances(lake_on_s3["endpoint"])
    glue = aws_client("glue", lake_on_s3["endpoint"])
    assert {j["Name"] for j in glue.get_jobs()["Jobs"] if j["Name"].startswith("dltrain-dltrain_")} == {
        "dltrain-dltrain_ingest-ingest_images",
        "dltrain-dltrain_retrain-score",
    }
    ingest, retrain = outcomes[2].state, outcomes[3].state
    assert ingest["xcom"]["ingest_images"]["skipped"] is True
    assert retrain["xcom"]["score"]["skipped"] is True and retrain["tasks"]["train"] == "skipped"
    assert ingest["report"]["verdict"] == retrain["report"]["verdict"] == "reproduced"

    forced = [(dag, ds, {**(conf or {}), "force": True}) for dag, ds, conf in runs]
    _run(monkeypatch, "emr_serverless", options, forced)
    assert _predictions(predictions, storage) == (version, rows), "EMR Serverless changed the predictions"
    from deltalake import DeltaTable

    assert DeltaTable(digits, storage_options=storage).version() == 0, "EMR Serverless committed again"
    assert _job_count(lake_on_s3["endpoint"], lake_on_s3["bucket"]) == 5  # its ETL and scoring jobs ran
    assert _since(before, submitted(lake_on_s3["endpoint"]))["emr serverless job runs"] == 2
    assert os.environ["DLTRAIN_ENGINE"] == "emr_serverless"
    _assert_trained_on_two_terminated_instances(lake_on_s3["endpoint"])  # the re-runs trained nothing


def _since(before: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    return {kind: count - before.get(kind, 0) for kind, count in now.items()}


def _assert_trained_on_two_terminated_instances(endpoint):
    import mlflow

    from airflow_provider_dltrain.store.config import default_tracking_uri

    reservations = aws_client("ec2", endpoint).describe_instances()["Reservations"]
    ours = [
        i for r in reservations for i in r["Instances"] if any(t["Key"] == "dltrain:job" for t in i["Tags"])
    ]
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in ours]
    assert sorted(t["dltrain:node_rank"] for t in tags if t["dltrain:dag_id"] == "dltrain_retrain") == [
        "0",
        "1",
    ]
    assert {i["State"]["Name"] for i in ours} == {"terminated"}
    client = mlflow.MlflowClient(tracking_uri=default_tracking_uri())
    versions = client.search_model_versions("name='dltrain_digits'")
    assert len(versions) == 1
    run = client.get_run(versions[0].run_id)
    assert run.info.status == "FINISHED" and run.data.tags["dltrain.backend"] == "ec2"
    assert run.data.tags["dltrain.world_size"] == "2" and "val_accuracy" in run.data.metrics
