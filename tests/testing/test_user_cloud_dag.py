"""A user's cloud DAG tested offline with the shipped fixture, as the docs' "Testing offline" page shows.

The DAG file and its package are what a user writes: a CSV on S3 into a Delta table by a Glue job
(``SparkToDeltaOperator``), then a SageMaker training job on that version (``TrainModelOperator``),
both through the connection ``aws``. ``fake_aws`` points the environment at the fake; ``airflow dags
test`` runs the DAG; the Glue run and the training job really run on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# what the docs show (docs/testing.md includes these files): the DAG file and its package ``points``
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

ROWS = 48


def _csv() -> bytes:
    lines = ["id,x1,x2,label"]
    for i in range(ROWS):
        x1, x2 = (i % 7) / 7, (i % 5) / 5
        lines.append(f"{i},{x1:.3f},{x2:.3f},{int(x1 > x2)}")
    return ("\n".join(lines) + "\n").encode()


# --8<-- [start:test]
def test_a_users_glue_and_sagemaker_dag_runs_against_the_fake_aws(fake_aws, tmp_path):
    from deltalake import DeltaTable
    from mlflow import MlflowClient

    from tests.conftest import migrated_airflow_db

    dags = tmp_path / "dags"
    shutil.copytree(EXAMPLES / "points", dags / "points", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLES / "points_nightly.py", dags / "points_nightly.py")
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


# --8<-- [end:test]
