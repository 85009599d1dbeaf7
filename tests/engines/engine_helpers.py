"""boto3 clients for the fake AWS and the leak scan; shared by the engine tests and their conftest."""

from __future__ import annotations

import boto3
from botocore.config import Config

# A 500 from an unimplemented moto call is retried 4 times with backoff otherwise.
TEST_CONFIG = Config(retries={"max_attempts": 1})

EMR_LIVE = ["STARTING", "BOOTSTRAPPING", "RUNNING", "WAITING"]
GLUE_LIVE = {"STARTING", "RUNNING", "STOPPING"}
EC2_LIVE = ["pending", "running", "stopping", "stopped"]
ES_RUN_LIVE = {"SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED"}


def aws_client(service: str, endpoint: str):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=TEST_CONFIG,
    )


def aws_connection(endpoint: str) -> str:
    """An Airflow ``aws`` connection (as the JSON of an ``AIRFLOW_CONN_*`` variable) to the fake AWS."""
    import json

    extra = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    return json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra})


def leaks(endpoint: str) -> list[str]:
    """Every cloud resource on the fake AWS still alive (costing money, on real AWS)."""
    found: list[str] = []
    emr = aws_client("emr", endpoint)
    for page in emr.get_paginator("list_clusters").paginate(ClusterStates=EMR_LIVE):
        found += [f"EMR cluster {c['Id']} ({c['Name']}) {c['Status']['State']}" for c in page["Clusters"]]

    glue = aws_client("glue", endpoint)
    for page in glue.get_paginator("get_jobs").paginate():
        for job in page["Jobs"]:
            for runs in glue.get_paginator("get_job_runs").paginate(JobName=job["Name"]):
                found += [
                    f"Glue run {job['Name']}/{r['Id']} {r['JobRunState']}"
                    for r in runs["JobRuns"]
                    if r["JobRunState"] in GLUE_LIVE
                ]

    es = aws_client("emr-serverless", endpoint)
    for page in es.get_paginator("list_applications").paginate():
        for app in page["applications"]:
            if app["state"] == "STARTED":
                found.append(f"EMR Serverless application {app['id']} ({app['name']}) STARTED")
            try:
                run_pages = list(es.get_paginator("list_job_runs").paginate(applicationId=app["id"]))
            except es.exceptions.ResourceNotFoundException:
                continue  # moto raises this for an application that never had a run
            for runs in run_pages:
                found += [
                    f"EMR Serverless run {app['id']}/{r['id']} {r['state']}"
                    for r in runs["jobRuns"]
                    if r["state"] in ES_RUN_LIVE
                ]
    found += _ec2_leaks(endpoint)

    sm = aws_client("sagemaker", endpoint)
    for status in ("InProgress", "Stopping"):
        for page in sm.get_paginator("list_training_jobs").paginate(StatusEquals=status):
            found += [
                f"SageMaker training job {j['TrainingJobName']} {status}"
                for j in page["TrainingJobSummaries"]
            ]
    return found


def _ec2_leaks(endpoint: str) -> list[str]:
    """Instances not terminated: a training cluster's node, or anything else a test launched."""
    ec2 = aws_client("ec2", endpoint)
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": EC2_LIVE}]
    )
    return [
        f"EC2 instance {i['InstanceId']} {i['State']['Name']}"
        for page in pages
        for r in page["Reservations"]
        for i in r["Instances"]
    ]


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
        "ec2 instances": instances,
    }
