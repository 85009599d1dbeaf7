"""A user's cloud DAG tested offline with the shipped fixture, as README's "Testing your DAGs offline" shows.

The DAG file and its package are what a user writes: a CSV on S3 into a Delta table by a Glue job
(``SparkToDeltaOperator``), then a SageMaker training job on that version (``TrainModelOperator``),
both through the connection ``aws``. ``fake_aws`` points the environment at the fake; ``airflow dags
test`` runs the DAG; the Glue run and the training job really run on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

DAG_FILE = """\
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
        inputs={"raw": {"path": LAKE + "/landing/{{ ds }}/points.csv", "format": "csv",
                        "options": {"header": "true"}}},
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
"""

ETL = """\
def to_features(spark, inputs, params):
    from pyspark.sql import functions as F

    raw = inputs["raw"]
    return raw.select(
        F.col("id").cast("long").alias("id"),
        F.array(F.col("x1").cast("float"), F.col("x2").cast("float")).alias("features"),
        F.col("label").cast("long").alias("label"),
    )
"""

MODEL = """\
import torch
from torch.nn import functional as F


def train(ctx):
    loader = ctx.dataloader(16, columns=["features", "label"])
    model = ctx.wrap(torch.nn.Linear(2, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(ctx.hparams["epochs"]):
        for batch in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(batch["features"]), batch["label"])
            loss.backward()
            opt.step()
        ctx.log_metrics({"loss": float(loss)}, step=epoch)
    ctx.save_model(model)
    return {"loss": float(loss)}
"""

ROWS = 48


def _csv() -> bytes:
    lines = ["id,x1,x2,label"]
    for i in range(ROWS):
        x1, x2 = (i % 7) / 7, (i % 5) / 5
        lines.append(f"{i},{x1:.3f},{x2:.3f},{int(x1 > x2)}")
    return ("\n".join(lines) + "\n").encode()


def test_a_users_glue_and_sagemaker_dag_runs_against_the_fake_aws(fake_aws, tmp_path):
    from deltalake import DeltaTable
    from mlflow import MlflowClient

    from tests.conftest import migrated_airflow_db

    dags = tmp_path / "dags"
    (dags / "points").mkdir(parents=True)
    (dags / "points_nightly.py").write_text(DAG_FILE)
    (dags / "points" / "__init__.py").write_text("")
    (dags / "points" / "etl.py").write_text(ETL)
    (dags / "points" / "model.py").write_text(MODEL)
    fake_aws.create_bucket("my-lake")
    fake_aws.client("s3").put_object(Bucket="my-lake", Key="landing/2026-11-24/points.csv", Body=_csv())

    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__UNIT_TEST_MODE"}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "DLTRAIN_HOME": str(tmp_path / "home"),
            "MLFLOW_TRACKING_URI": mlflow_uri,
            "DLTRAIN_POLL_INTERVAL": "1",  # the DAG polls its jobs every second
        }
    )
    assert env["AIRFLOW_CONN_AWS"] == fake_aws.conn_json and env["AWS_ENDPOINT_URL"] == fake_aws.endpoint_url
    migrated_airflow_db(env)  # what `airflow db migrate` does, copied from the session's template
    sagemaker = fake_aws.client("sagemaker")
    before = {j["TrainingJobName"] for j in sagemaker.list_training_jobs()["TrainingJobSummaries"]}
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "points_nightly", "2026-11-24"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    # the Delta table on the fake's S3: delta-rs finds the fake through AWS_ENDPOINT_URL
    table = DeltaTable("s3://my-lake/lake/points")
    assert table.version() == 0 and table.to_pyarrow_table().num_rows == ROWS
    runs = fake_aws.client("glue").get_job_runs(JobName="dltrain-points_nightly-ingest")["JobRuns"]
    assert [r["JobRunState"] for r in runs] == ["SUCCEEDED"]
    jobs = [
        j
        for j in sagemaker.list_training_jobs()["TrainingJobSummaries"]
        if j["TrainingJobName"] not in before
    ]
    assert [j["TrainingJobStatus"] for j in jobs] == ["Completed"], jobs
    client = MlflowClient(tracking_uri=mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("points_nightly").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["dltrain.backend"] == "sagemaker"
    assert fake_aws.leaks() == []
