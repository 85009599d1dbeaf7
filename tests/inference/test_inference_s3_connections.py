"""Each table through its own connection: two S3 endpoints (two moto servers), one per connection.

A bucket exists only on its own endpoint, so reading a table with another table's connection fails:
ETL, scoring and lineage pass only if every table is reached through its own connection.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from airflow_provider_dltrain.lake import latest, open_table, s3_storage_options

DAY = "2026-11-28"
N = 6


@pytest.fixture(scope="module")
def second_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _bucket(endpoint: str, prefix: str) -> str:
    import boto3

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def _conn(monkeypatch, conn_id: str, endpoint: str) -> str:
    extra = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    conn = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


def _context():
    from airflow.sdk.execution_time.context import OutletEventAccessors

    start = datetime.fromisoformat(DAY).replace(tzinfo=timezone.utc)
    ti = SimpleNamespace(dag_id="nightly", run_id=f"scheduled__{DAY}", task_id="t", try_number=1)
    return {"ds": DAY, "ti": ti, "logical_date": start, "outlet_events": OutletEventAccessors()}


def features_from_csv(spark, frames, params):
    from pyspark.sql import functions as F

    raw = frames["raw"].select(F.col("id").cast("long").alias("id"), *[f"f{i}" for i in range(64)])
    kept = raw.join(frames["labels"].select("id"), "id")  # the label deleted from the Delta input drops out
    return kept.select("id", F.array(*[F.col(f"f{i}").cast("float") for i in range(64)]).alias("features"))


@pytest.fixture(scope="module")
def world(moto_server, second_endpoint):
    """Endpoint A holds the lake bucket (features), endpoint B the landing and scores buckets."""
    return SimpleNamespace(
        lake=_bucket(moto_server, "lake"),
        landing=_bucket(second_endpoint, "landing"),
        scores=_bucket(second_endpoint, "scores"),
        a=moto_server,
        b=second_endpoint,
    )


def test_etl_scoring_and_lineage_each_reach_their_tables_through_their_own_connection(
    spark, store, world, monkeypatch
):
    import boto3
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from inference_helpers import features

    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator
    from airflow_provider_dltrain.operators.lineage import DeltaLineageOperator
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    conn_a, conn_b = _conn(monkeypatch, "aws_lake", world.a), _conn(monkeypatch, "aws_landing", world.b)
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_S3TEST", json.dumps({"conn_type": "mlflow", "host": store.tracking.tracking_uri})
    )
    b_options = s3_storage_options(
        access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=world.b
    )
    x = features(N, 11)
    csv = "id," + ",".join(f"f{i}" for i in range(64)) + "\n"
    csv += "".join(f"{i}," + ",".join(str(float(v)) for v in x[i]) + "\n" for i in range(N))
    boto3.client("s3", endpoint_url=world.b, region_name="us-east-1").put_object(
        Bucket=world.landing, Key=f"raw/{DAY}/part-0.csv", Body=csv.encode()
    )
    labels_uri = f"s3://{world.landing}/labels"
    write_deltalake(labels_uri, pa.table({"id": pa.array(range(N), pa.int64())}), storage_options=b_options)
    DeltaTable(labels_uri, storage_options=b_options).delete("id = 3")

    features_uri = f"s3://{world.lake}/features"
    etl = SparkToDeltaOperator(
        task_id="etl",
        table_uri=features_uri,
        partition={"ds": DAY},
        transform=features_from_csv,
        inputs={
            "raw": {"path": f"s3://{world.landing}/raw/{DAY}/", "format": "csv", "aws_conn_id": conn_b},
            "labels": {**latest(labels_uri, b_options).to_dict(), "aws_conn_id": conn_b},
        },
        aws_conn_id=conn_a,
    )
    etl.execute(_context())
    a_options = s3_storage_options(
        access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=world.a
    )
    assert sorted(open_table(features_uri, None, a_options).to_pyarrow_table().column("id").to_pylist()) == [
        0,
        1,
        2,
        4,
        5,
    ]

    scores_uri = f"s3://{world.scores}/scores"
    score = SparkBatchInferenceOperator(
        task_id="score",
        model="models:/digits/1",
        input=latest(features_uri, a_options).to_dict(),
        table_uri=scores_uri,
        partition={"ds": DAY},
        scoring={"feature_columns": ["features"], "key_columns": ["id"]},
        input_filter=[["ds", "=", DAY]],
        mlflow_conn_id="mlflow_s3test",
        aws_conn_id=conn_b,
        input_aws_conn_id=conn_a,
    )
    out = score.execute(_context())
    assert open_table(scores_uri, None, b_options).to_pyarrow_table().num_rows == N - 1

    traced = DeltaLineageOperator(
        task_id="lineage",
        table_uri=scores_uri,
        version=out,
        mlflow_conn_id="mlflow_s3test",
        aws_conn_id=conn_b,
        aws_conn_ids={f"s3://{world.lake}": conn_a},
    ).execute(_context())
    assert traced["scored_input_commit"]["uri"] == features_uri
    # the prediction table's connection cannot reach the input's bucket
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.exceptions import TableNotFoundError

    with pytest.raises(AirflowFailException, match=world.lake) as info:
        DeltaLineageOperator(
            task_id="lineage",
            table_uri=scores_uri,
            version=out,
            mlflow_conn_id="mlflow_s3test",
            aws_conn_id=conn_b,
        ).execute(_context())
    assert isinstance(info.value.__cause__, TableNotFoundError)


def test_a_connection_without_credentials_fails_naming_the_table(store, world, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    empty = {"conn_type": "aws", "extra": {"endpoint_url": world.a, "region_name": "us-east-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_EMPTY", json.dumps(empty))
    # the store's own connection: the model resolves whichever test ran before on this worker
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_S3TEST", json.dumps({"conn_type": "mlflow", "host": store.tracking.tracking_uri})
    )
    _conn(monkeypatch, "aws_out", world.b)
    input_uri = f"s3://{world.lake}/features"
    op = SparkBatchInferenceOperator(
        task_id="score",
        model="models:/digits/1",
        input={"uri": input_uri, "version": 0},
        table_uri=f"s3://{world.scores}/scores",
        partition={"ds": DAY},
        scoring={"feature_columns": ["features"], "key_columns": ["id"]},
        mlflow_conn_id="mlflow_s3test",
        aws_conn_id="aws_out",
        input_aws_conn_id="aws_empty",
    )
    with pytest.raises(
        AirflowFailException, match=rf"table {input_uri}: no AWS credentials for connection 'aws_empty'"
    ):
        op.execute(_context())
