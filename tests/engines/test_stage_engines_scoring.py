"""SparkBatchInferenceOperator with engine=sagemaker_processing / ec2: Airflow -> the engine -> fake AWS
(a processing job run as a process, an instance whose user data runs) -> the job script, which loads
the champion's files itself -> predictions committed to a Delta table on S3."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from unittest import mock

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.lake.storage import s3_storage_options
from airflow_provider_dltrain.testing.fake_aws import INSTANCE_PROFILE
from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for, leaks

AWS_CONN, MLFLOW_CONN = "aws_fake_scoring", "mlflow_fake_scoring"
ENGINES = ["sagemaker_processing", "ec2"]
MODEL = "stage_scorer"
DAY = "2026-11-28"
N_FEATURES, ROWS = 4, 5
# every test starts (or counts) cloud jobs on the fake AWS: not for make test-quick
pytestmark = pytest.mark.slow


def _features():
    import numpy as np

    return np.random.default_rng(3).normal(size=(ROWS, N_FEATURES)).astype("float32")


def _register_champion(root: Path):
    """``MODEL`` v1 (a tiny MLP, pt2) gated champion from 2026-11-20; v2, newer, is not champion."""
    import mlflow
    import mlflow.pytorch
    import torch

    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote
    from airflow_provider_dltrain.store.config import TrackingConfig, ensure_experiment

    tracking = TrackingConfig(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    torch.manual_seed(5)
    module = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ).eval()
    with tracking.activated():
        client = mlflow.MlflowClient()
        experiment = ensure_experiment(client, "stage-scoring", tracking.tracking_uri)
        with mlflow.start_run(experiment_id=experiment) as run:  # no global experiment set
            mlflow.log_metric("val_loss", 0.5)
            mlflow.pytorch.log_model(
                module,
                name="model",
                input_example=_features()[:2],
                registered_model_name=MODEL,
                serialization_format="pt2",
                pip_requirements=["torch"],  # skips seconds of requirement inference
            )
        (first,) = client.search_model_versions(f"name='{MODEL}'")
        client.create_model_version(MODEL, first.source, run.info.run_id)  # v2: the same files, no alias
    promoted = gate_and_promote(
        tracking, model_name=MODEL, version=1, gate=GateSpec("val_loss"), data_cutoff="2026-11-20"
    )
    assert promoted.promoted, promoted
    return tracking, module


def _operator(cloud, engine):
    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    return SparkBatchInferenceOperator(
        task_id=f"score_{engine}",
        model={"name": MODEL, "alias": "champion"},
        input=cloud["input"],
        table_uri=f"s3://{cloud['bucket']}/lake/predictions_{engine}",
        partition={"ds": DAY},
        scoring={"feature_columns": ["features"], "key_columns": ["id"]},
        engine=engine,
        engine_options=cloud["options"][engine],
        mlflow_conn_id=MLFLOW_CONN,
        aws_conn_id=AWS_CONN,
        poll_interval=0.2,
    )


def _context(task_id, try_number=1):
    ti = mock.MagicMock(
        dag_id="score_dag", run_id=f"manual__{DAY}", task_id=task_id, try_number=try_number, map_index=-1
    )
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id="score_dag"),
        "run_id": f"manual__{DAY}",
        "logical_date": None,
        "outlet_events": {},
    }


def _jobs(cloud, engine):
    """How many jobs were ever submitted for ``engine`` (processing jobs, or instances)."""
    if engine == "sagemaker_processing":
        sm = aws_client("sagemaker", cloud["endpoint"])
        return sum(
            len(p["ProcessingJobSummaries"]) for p in sm.get_paginator("list_processing_jobs").paginate()
        )
    ec2 = aws_client("ec2", cloud["endpoint"])
    pages = ec2.get_paginator("describe_instances").paginate()
    return sum(len(r["Instances"]) for p in pages for r in p["Reservations"])


@pytest.fixture(scope="module")
def scored(fake_aws_endpoint, tmp_path_factory):
    """Both engines score the same input with the champion at once (two Spark jobs side by side).

    Yields the cloud (endpoint, bucket, storage, input ref, engine options, the logged module) and,
    per engine, the jobs submitted before and the operator's result (or its error).
    """
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_provider_dltrain.lake import latest

    endpoint = fake_aws_endpoint
    tracking, module = _register_champion(tmp_path_factory.mktemp("stage-scoring-mlflow"))
    bucket = f"score-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    key, secret = credentials_for(endpoint)
    storage = s3_storage_options(access_key=key, secret_key=secret, region="us-east-1", endpoint_url=endpoint)
    x = _features()
    flat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), N_FEATURES).cast(pa.list_(pa.float32()))
    input_uri = f"s3://{bucket}/lake/features"
    write_deltalake(
        input_uri,
        pa.table({"id": pa.array(range(ROWS), pa.int64()), "features": flat}),
        storage_options=storage,
    )
    staging = f"s3://{bucket}/staging"
    cloud = {
        "endpoint": endpoint,
        "bucket": bucket,
        "storage": storage,
        "input": latest(input_uri, storage).to_dict(),
        "features": x,
        "module": module,
        "options": {
            "sagemaker_processing": {
                "staging_uri": staging,
                "role": "arn:aws:iam::123456789012:role/SageMakerProcessingRole",
                "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/dltrain-spark:3.5",
                "max_runtime_s": 900,
            },
            "ec2": {
                "staging_uri": staging,
                "image_id": "ami-0abcdef1234567890",
                "instance_profile": INSTANCE_PROFILE,
                "max_minutes": 30,
            },
        },
    }
    aws = json.loads(connection_json(endpoint))  # the fake's per-start keys
    runs: dict[str, dict] = {engine: {"before": _jobs(cloud, engine)} for engine in ENGINES}

    def run(engine):
        op = _operator(cloud, engine)
        check = op.rerun_check

        def recorded_check():  # what the first run decided, for the assertions' messages
            decided = check()
            runs[engine]["reason"] = decided[0].reason
            return decided

        op.rerun_check = recorded_check
        try:
            runs[engine]["result"] = op.execute(_context(op.task_id))
        except Exception as err:
            runs[engine]["result"] = err

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(f"AIRFLOW_CONN_{AWS_CONN.upper()}", json.dumps(aws))
        mlflow = {"conn_type": "mlflow", "host": tracking.tracking_uri}
        mp.setenv(f"AIRFLOW_CONN_{MLFLOW_CONN.upper()}", json.dumps(mlflow))
        # one after the other, as Airflow runs two tasks: each in its own process, never two operators
        # in threads of one (side by side, one of them now and then established no re-run facts under load)
        for engine in ENGINES:
            run(engine)
        yield cloud, runs


@pytest.mark.parametrize("engine", ENGINES)
def test_the_job_commits_the_champions_predictions_and_records_its_version(scored, engine):
    import torch
    from deltalake import DeltaTable

    from airflow_provider_dltrain.lake import DeltaLog

    cloud, runs = scored
    result = runs[engine]["result"]
    assert not isinstance(result, BaseException), result
    assert result["version"] == 0 and result["committed"] is True
    assert _jobs(cloud, engine) == runs[engine]["before"] + 1  # one processing job, or one instance
    table = DeltaTable(result["uri"], storage_options=cloud["storage"])
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    with torch.inference_mode():
        probs = torch.softmax(cloud["module"](torch.from_numpy(cloud["features"])), dim=1)
    score, label = probs.max(dim=1)
    assert [r["id"] for r in rows] == list(range(ROWS))
    assert [r["prediction"] for r in rows] == label.tolist()
    assert [r["score"] for r in rows] == pytest.approx(score.tolist(), rel=1e-5)
    # v1 is the champion; v2 is newer but holds no alias
    assert {(r["model_name"], r["model_version"], r["input_version"], r["ds"]) for r in rows} == {
        (MODEL, 1, cloud["input"]["version"], DAY)
    }
    info = DeltaLog(result["uri"], cloud["storage"]).commit_info(0)
    assert info["dltrain.model_name"] == MODEL and info["dltrain.model_version"] == "1"
    # what an unchanged re-run compares against (the facts travel to the job with its spec)
    assert "dltrain.rerun_facts" in info, runs[engine].get("reason")
    assert json.loads(info["dltrain.rerun_facts"])["model"]["version"] == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unchanged_rerun_submits_no_job_and_nothing_is_left_running(scored, engine):
    cloud, _ = scored
    jobs = _jobs(cloud, engine)
    op = _operator(cloud, engine)
    again = op.execute(_context(op.task_id, try_number=2))
    first = (scored[1][engine].get("reason"), scored[1][engine]["result"])
    assert again["version"] == 0 and again["committed"] is False, (first, again)
    assert again.get("skipped") is True, (first, again)
    assert _jobs(cloud, engine) == jobs  # the re-run check ran before any engine
    left = leaks(cloud["endpoint"])
    assert not left, "cloud resources left running:\n  " + "\n  ".join(left)
