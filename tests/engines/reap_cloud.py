"""Leaked resources for the reaper tests: jobs submitted by the real engine adapters (so they carry the
tags and arguments the engines really set) whose script sleeps, as a job does when its task has died."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.engines import JobHandle, RunSpec, StagedRun, get_engine
from airflow_provider_dltrain.engines.run_spec import RunIdentity

ROLE = "arn:aws:iam::123456789012:role/reaper-tests"
DAG_ID = "reap_dag"
RUN_ID = "scheduled__2026-11-28"
# The engines pass `--spec <uri> --code <uri>`: write the pid where the spec would be, then sleep.
SLEEP_PY = """\
import argparse, json, os, time
import boto3
parser = argparse.ArgumentParser()
parser.add_argument("--spec", required=True)
args, _ = parser.parse_known_args()
bucket, _, key = args.spec[len("s3://"):].partition("/")
boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=json.dumps({"pid": os.getpid()}))
time.sleep(120)
"""


def wait_for(fetch: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s; last value: {value!r}")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """A zombie counts as gone: it has exited and only waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\nState:\tZ" not in status.read()
    except OSError:
        return False


def who(task_id: str, map_index: int = -1, dag_id: str = DAG_ID) -> RunIdentity:
    return RunIdentity(dag_id=dag_id, run_id=RUN_ID, task_id=task_id, map_index=map_index)


class Cloud:
    """A bucket holding the sleeping script, and helpers to leak and inspect resources."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.clients: dict[str, Any] = {}
        self.bucket = f"reap-{uuid.uuid4().hex[:10]}"
        self.client("s3").create_bucket(Bucket=self.bucket)
        self.client("s3").put_object(Bucket=self.bucket, Key="sleep.py", Body=SLEEP_PY.encode())
        self.applications: list[str] = []

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = aws_client(service, self.endpoint)
        return self.clients[service]

    def submit(self, engine: str, identity: RunIdentity) -> tuple[JobHandle, int]:
        """Submit a sleeping job through the ``engine`` adapter; the handle and the job's pid."""
        options: dict[str, Any] = {"staging_uri": f"s3://{self.bucket}/staging"}
        if engine == "glue":
            # A fresh job each time: moto 5.2.5 has no UpdateJob, which a second submit to one job calls.
            options.update(role=ROLE, job_name=f"dltrain-reap-{uuid.uuid4().hex[:8]}")
        elif engine == "emr":
            options["job_flow"] = {
                "ReleaseLabel": "emr-7.5.0",
                "Instances": {"InstanceCount": 1, "MasterInstanceType": "m5.xlarge"},
                "JobFlowRole": "EMR_EC2_DefaultRole",
                "ServiceRole": "EMR_DefaultRole",
            }
        else:
            es = self.client("emr-serverless")
            app = es.create_application(name="reap", releaseLabel="emr-7.5.0", type="SPARK")
            self.applications.append(app["applicationId"])
            options.update(application_id=app["applicationId"], execution_role_arn=ROLE)
        spec = RunSpec(
            stage="etl", table_uri="s3://nowhere/t", partition={"ds": "x"}, params={}, identity=identity
        )
        key = f"pids/{uuid.uuid4().hex}.json"
        staged = StagedRun(
            spec=spec,
            spec_uri=f"s3://{self.bucket}/{key}",
            script_uri=f"s3://{self.bucket}/sleep.py",
            code_uri=f"s3://{self.bucket}/no-code.zip",
            result_uri=f"s3://{self.bucket}/result.json",
        )
        handle = get_engine(engine, self.client, options).submit(staged)
        body = wait_for(lambda: self._read(key), bool)
        return handle, int(body["pid"])

    def _read(self, key: str) -> dict | None:
        s3 = self.client("s3")
        try:
            return json.loads(s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    def cluster(self, identity: RunIdentity | None) -> str:
        """A cluster that stays up (``WAITING``), tagged with ``identity`` (untagged for None)."""
        tags = [{"Key": k, "Value": v} for k, v in (identity.tags() if identity else {}).items()]
        cluster_id = self.client("emr").run_job_flow(
            Name=identity.job_name if identity else f"not-ours-{uuid.uuid4().hex[:6]}",
            ReleaseLabel="emr-7.5.0",
            Instances={
                "InstanceCount": 1,
                "MasterInstanceType": "m5.xlarge",
                "KeepJobFlowAliveWhenNoSteps": True,
            },
            JobFlowRole="EMR_EC2_DefaultRole",
            ServiceRole="EMR_DefaultRole",
            Tags=tags,
        )["JobFlowId"]
        wait_for(lambda: self.cluster_state(cluster_id), lambda state: state == "WAITING")
        return cluster_id

    def cluster_state(self, cluster_id: str) -> str:
        return self.client("emr").describe_cluster(ClusterId=cluster_id)["Cluster"]["Status"]["State"]

    def state(self, handle: JobHandle) -> str:
        """The service's state of a submitted job (for EMR: its cluster's)."""
        ids = handle.ids
        if handle.engine == "emr":
            return self.cluster_state(ids["cluster_id"])
        if handle.engine == "glue":
            run = self.client("glue").get_job_run(JobName=ids["job_name"], RunId=ids["job_run_id"])
            return str(run["JobRun"]["JobRunState"])
        es = self.client("emr-serverless")
        return str(
            es.get_job_run(applicationId=ids["application_id"], jobRunId=ids["job_run_id"])["jobRun"]["state"]
        )

    def close(self) -> None:
        es = self.client("emr-serverless")
        for app in self.applications:
            es.stop_application(applicationId=app)
            es.delete_application(applicationId=app)
