"""boto3 clients for the fake AWS, the Airflow connection to it and a staged EC2 run; shared by the
engine tests and the container tier."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
from botocore.config import Config

from airflow_provider_dltrain.engines import RunIdentity
from airflow_provider_dltrain.engines.base import StagedRun
from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for

# The EC2 tests' entry: an all-reduce across the ranks (the real entry is tested with the operator).
EC2_ENTRY = Path(__file__).with_name("ec2_entry.py")

# A 500 from an unimplemented moto call is retried 4 times with backoff otherwise.
TEST_CONFIG = Config(retries={"max_attempts": 1})


def aws_client(service: str, endpoint: str):
    """A client of the fake this process started at ``endpoint``, signing with its per-start keys."""
    key, secret = credentials_for(endpoint)
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=TEST_CONFIG,
    )


def aws_connection(endpoint: str) -> str:
    """An Airflow ``aws`` connection (as the JSON of an ``AIRFLOW_CONN_*`` variable) to the fake AWS."""
    return connection_json(endpoint)


def submitted(endpoint: str) -> dict[str, int]:
    """How many jobs were ever submitted to the fake AWS, per kind, whatever their state now."""
    glue = aws_client("glue", endpoint)
    glue_runs = sum(
        len(runs["JobRuns"])
        for page in glue.get_paginator("get_jobs").paginate()
        for job in page["Jobs"]
        for runs in glue.get_paginator("get_job_runs").paginate(JobName=job["Name"])
    )
    emr = aws_client("emr", endpoint)
    clusters = [c["Id"] for page in emr.get_paginator("list_clusters").paginate() for c in page["Clusters"]]
    steps = sum(len(emr.list_steps(ClusterId=c)["Steps"]) for c in clusters)
    es = aws_client("emr-serverless", endpoint)
    es_runs = 0
    for page in es.get_paginator("list_applications").paginate():
        for app in page["applications"]:
            try:
                es_runs += sum(
                    len(p["jobRuns"])
                    for p in es.get_paginator("list_job_runs").paginate(applicationId=app["id"])
                )
            except es.exceptions.ResourceNotFoundException:
                continue  # moto: an application that never had a run
    sm = aws_client("sagemaker", endpoint)
    training = sum(len(p["TrainingJobSummaries"]) for p in sm.get_paginator("list_training_jobs").paginate())
    processing = sum(
        len(p["ProcessingJobSummaries"]) for p in sm.get_paginator("list_processing_jobs").paginate()
    )
    ec2 = aws_client("ec2", endpoint)
    instances = sum(
        len(r["Instances"])
        for p in ec2.get_paginator("describe_instances").paginate()
        for r in p["Reservations"]
    )
    return {
        "glue job runs": glue_runs,
        "emr clusters": len(clusters),
        "emr steps": steps,
        "emr serverless job runs": es_runs,
        "sagemaker training jobs": training,
        "sagemaker processing jobs": processing,
        "ec2 instances": instances,
    }


def staged_ec2_run(
    endpoint: str,
    bucket: str,
    params: dict,
    *,
    dag_id: str = "ec2_dag",
    task_id: str = "train",
    try_number: int = 1,
) -> StagedRun:
    """A training job staged in ``s3://{bucket}/staging`` as the EC2 engine expects, its entry the
    all-reduce script (which reads ``params`` from the spec's ``hparams``)."""
    s3 = aws_client("s3", endpoint)
    identity = RunIdentity(
        dag_id=dag_id, run_id=f"r-{uuid.uuid4().hex[:6]}", task_id=task_id, try_number=try_number
    )
    root = f"s3://{bucket}/staging"
    run = f"{root}/runs/{identity.task_key}/{try_number}"
    # a training job's spec: the EC2 engine runs a stage's RunSpec on one instance under plain python
    spec = TrainJobSpec(
        train_fn="ec2_entry:main",
        dataset={"uri": "s3://x/t", "version": 0},
        data_filter=[],
        hparams=params,
        seed=0,
        world_size=1,
        data_fingerprint="",
        identity=identity,
        result_uri=f"{run}/result.json",
    )
    s3.put_object(Bucket=bucket, Key="staging/code/ec2_entry.py", Body=EC2_ENTRY.read_bytes())
    s3.put_object(
        Bucket=bucket,
        Key=f"staging/runs/{identity.task_key}/{try_number}/spec.json",
        Body=spec.to_json().encode(),
    )
    return StagedRun(
        spec, f"{run}/spec.json", f"{root}/code/ec2_entry.py", f"{root}/code/none.zip", f"{run}/result.json"
    )
