"""SparkToDeltaOperator with engine=glue / emr / emr_serverless: Airflow → Amazon provider → fake AWS →
the job script → Delta on S3 → the operator returns the DeltaRef."""

from __future__ import annotations

import json
import threading
import time
import uuid
from unittest import mock

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.lake.storage import s3_storage_options

CONN = "aws_fake"


@pytest.fixture
def cloud(aws_leak_check, monkeypatch, tmp_path):
    """A bucket with a CSV input, an Airflow aws connection to the fake, and engine options per engine."""
    endpoint = aws_leak_check
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(conn))
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3", endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="landing/raw.csv", Body=b"id,x\n1,1.5\n2,2.5\n3,-1\n")
    es = aws_client("emr-serverless", endpoint)
    app = es.create_application(name="dltrain", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]
    options = {
        "glue": {"staging_uri": f"s3://{bucket}/staging", "role": "arn:aws:iam::123456789012:role/GlueRole"},
        "emr": {
            "staging_uri": f"s3://{bucket}/staging",
            "job_flow": {
                "ReleaseLabel": "emr-7.5.0",
                "Instances": {"InstanceCount": 1, "MasterInstanceType": "m5.xlarge"},
                "JobFlowRole": "EMR_EC2_DefaultRole",
                "ServiceRole": "EMR_DefaultRole",
            },
        },
        "emr_serverless": {
            "staging_uri": f"s3://{bucket}/staging",
            "application_id": app,
            "execution_role_arn": "arn:aws:iam::123456789012:role/EmrServerlessRole",
        },
    }
    storage = s3_storage_options(
        access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=endpoint
    )
    yield {"endpoint": endpoint, "bucket": bucket, "options": options, "storage": storage, "app": app}
    es.stop_application(applicationId=app)
    es.delete_application(applicationId=app)


def _operator(cloud, engine, transform="etl_jobs:double", **kwargs):
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    bucket = cloud["bucket"]
    return SparkToDeltaOperator(
        task_id=f"ingest_{engine}",
        table_uri=f"s3://{bucket}/lake/t_{engine}",
        partition={"ds": "2026-11-28"},
        transform=transform,
        inputs={
            "raw": {"path": f"s3://{bucket}/landing/raw.csv", "format": "csv", "options": {"header": "true"}}
        },
        engine=engine,
        engine_options=cloud["options"][engine],
        aws_conn_id=CONN,
        poll_interval=0.5,
        **kwargs,
    )


def _context(task_id, try_number=1):
    ti = mock.MagicMock(
        dag_id="cloud_dag", run_id="manual__2026-11-28", task_id=task_id, try_number=try_number, map_index=-1
    )
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id="cloud_dag"),
        "run_id": "manual__2026-11-28",
        "logical_date": None,
        "outlet_events": {},
    }


@pytest.mark.parametrize("engine", ["glue", "emr", "emr_serverless"])
def test_cloud_engine_commits_the_partition_and_returns_the_delta_ref(cloud, engine):
    from deltalake import DeltaTable

    op = _operator(cloud, engine)
    result = op.execute(_context(op.task_id))
    assert result["version"] == 0 and result["committed"] is True and result["rows_written"] == 3
    table = DeltaTable(result["uri"], storage_options=cloud["storage"])
    rows = sorted(table.to_pyarrow_table().select(["id", "x2", "ds"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "x2": 3.0, "ds": "2026-11-28"},
        {"id": 2, "x2": 5.0, "ds": "2026-11-28"},
        {"id": 3, "x2": -2.0, "ds": "2026-11-28"},
    ]
    history = table.history()[0]
    assert history["airflow.dag_id"] == "cloud_dag" and history["airflow.task_id"] == op.task_id
