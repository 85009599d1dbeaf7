"""SparkToDeltaOperator with engine=glue / emr / emr_serverless: Airflow → Amazon provider → fake AWS →
the job script → Delta on S3 → the operator returns the DeltaRef."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from unittest import mock

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.lake.storage import s3_storage_options
from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for

CONN = "aws_fake"
# every test starts cloud jobs (a Spark process each) on the fake AWS: not for make test-quick
pytestmark = pytest.mark.slow


@pytest.fixture
def cloud(aws_leak_check, monkeypatch, tmp_path):
    """A bucket with a CSV input, an Airflow aws connection to the fake, and engine options per engine."""
    endpoint = aws_leak_check
    conn = json.loads(connection_json(endpoint))  # the fake's per-start keys
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
                "LogUri": f"s3://{bucket}/emr-logs/",
            },
        },
        "emr_serverless": {
            "staging_uri": f"s3://{bucket}/staging",
            "application_id": app,
            "execution_role_arn": "arn:aws:iam::123456789012:role/EmrServerlessRole",
            "log_uri": f"s3://{bucket}/serverless-logs",
        },
    }
    key, secret = credentials_for(endpoint)
    storage = s3_storage_options(access_key=key, secret_key=secret, region="us-east-1", endpoint_url=endpoint)
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


def _log_places(cloud, engine, ids):
    if engine == "glue":  # the group is the run's LogGroupName (moto's: test/log), the stream its id
        return f"log group test/log/output (errors: test/log/error), log stream {ids['job_run_id']}"
    if engine == "emr":
        return f"s3://{cloud['bucket']}/emr-logs/{ids['cluster_id']}/steps/{ids['step_id']}/"
    prefix = f"s3://{cloud['bucket']}/serverless-logs/applications/{cloud['app']}/jobs/"
    return f"{prefix}{ids['job_run_id']}/SPARK_DRIVER/"


def _table_exists(cloud, engine):
    s3 = aws_client("s3", cloud["endpoint"])
    listed = s3.list_objects_v2(Bucket=cloud["bucket"], Prefix=f"lake/t_{engine}/_delta_log/")
    return bool(listed.get("KeyCount"))


@pytest.mark.parametrize("engine", ["glue", "emr_serverless"])
def test_a_failing_job_fails_the_task_with_the_jobs_message_and_commits_nothing(cloud, engine):
    from airflow_provider_dltrain.engines import JobFailedError

    op = _operator(cloud, engine, transform="etl_jobs:broken", transform_params={"why": "column x is text"})
    with pytest.raises(JobFailedError, match="transform refused the input: column x is text"):
        op.execute(_context(op.task_id))
    assert not _table_exists(cloud, engine)


def test_a_bad_write_option_fails_before_any_job_is_submitted(cloud):
    from airflow.sdk.exceptions import AirflowFailException

    glue = aws_client("glue", cloud["endpoint"])

    def runs():
        return sum(len(glue.get_job_runs(JobName=j["Name"])["JobRuns"]) for j in glue.get_jobs()["Jobs"])

    before = runs()
    op = _operator(cloud, "glue", write={"max_bad_fraktion": 0.1})
    with pytest.raises(AirflowFailException, match="max_bad_fraktion"):
        op.execute(_context(op.task_id))
    assert runs() == before


def _running(cloud, engine, op):
    """Wait until the operator's job is running on the service."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = op._job
        if job is not None and job[0].poll(job[1]).raw in {"RUNNING"}:
            return job[1]
        time.sleep(0.2)
    raise AssertionError(f"{engine} job never ran")


@pytest.mark.parametrize("engine", ["glue", "emr", "emr_serverless"])
def test_killing_the_task_cancels_the_job_and_terminates_the_transient_cluster(cloud, engine):
    op = _operator(cloud, engine, transform="etl_jobs:slow", transform_params={"seconds": 120})
    errors = []

    def execute():
        try:
            op.execute(_context(op.task_id))
        except Exception as err:
            errors.append(err)

    worker = threading.Thread(target=execute)
    worker.start()
    handle = _running(cloud, engine, op)
    op.on_kill()
    worker.join(60)
    assert not worker.is_alive() and errors, "the task kept waiting after on_kill"
    assert "cancelled" in str(errors[0]) or "CANCELLED" in str(errors[0]) or "STOPPED" in str(errors[0])
    assert not _table_exists(cloud, engine)
    if engine == "emr":
        emr = aws_client("emr", cloud["endpoint"])
        state = emr.describe_cluster(ClusterId=handle.ids["cluster_id"])["Cluster"]["Status"]["State"]
        assert state.startswith("TERMINAT")
    # aws_leak_check: no cluster or job run is left alive


@pytest.mark.parametrize("engine", ["glue", "emr", "emr_serverless"])
def test_a_retry_after_a_worker_crash_reattaches_to_the_running_job_which_commits(cloud, engine):
    """Try 1 submits and its worker dies (no finally runs); try 2 finds the job and waits for it; the
    job commits the partition and the operator returns the DeltaRef, logs the job's summary and
    pushes the job (the "Job console" link)."""
    from deltalake import DeltaTable

    from airflow_provider_dltrain.operators.engine_run import XCOM_JOB, EngineRun

    def jobs():
        if engine == "glue":
            glue = aws_client("glue", cloud["endpoint"])
            return sum(len(glue.get_job_runs(JobName=j["Name"])["JobRuns"]) for j in glue.get_jobs()["Jobs"])
        if engine == "emr":
            return len(aws_client("emr", cloud["endpoint"]).list_clusters()["Clusters"])
        es = aws_client("emr-serverless", cloud["endpoint"])
        try:
            return len(es.list_job_runs(applicationId=cloud["app"])["jobRuns"])
        except es.exceptions.ResourceNotFoundException:  # moto: an application with no run yet
            return 0

    before = jobs()
    first = _operator(cloud, engine, transform="etl_jobs:slow", transform_params={"seconds": 4})

    class WorkerDied(BaseException):
        pass

    def crash(self, engine_, handle, event):
        raise WorkerDied()

    with mock.patch.object(EngineRun, "_finish", crash), pytest.raises(WorkerDied):
        first.execute(_context(first.task_id, try_number=1))

    second = _operator(cloud, engine, transform="etl_jobs:slow", transform_params={"seconds": 4})
    # The operator's task log, kept here (Airflow's logging setup may replace the root's handlers).
    task_log, records = logging.getLogger(f"dltrain.tests.task.{engine}"), []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    task_log.addHandler(handler)
    task_log.setLevel(logging.INFO)
    context = _context(second.task_id, try_number=2)
    try:
        with mock.patch.object(type(second), "log", task_log):
            result = second.execute(context)
    finally:
        task_log.removeHandler(handler)
    assert second._job is None
    assert jobs() == before + 1  # one job for the task instance, whatever the number of tries
    # the job committed the partition, and the operator returns its DeltaRef
    assert result["version"] == 0 and result["committed"] is True and result["rows_written"] == 3
    # The task log tells the story of the job: what it wrote, and where its own logs are.
    (summary,) = [r.getMessage() for r in records if " succeeded" in r.getMessage()]
    pushed = {c.kwargs["key"]: c.kwargs["value"] for c in context["ti"].xcom_push.call_args_list}
    ids = pushed[XCOM_JOB]["ids"]
    lines = summary.splitlines()
    assert lines[1:3] == [f"  table {result['uri']} version 0: committed", "  rows: 3 written, 0 quarantined"]
    assert len(lines) == 4 and lines[3].startswith("  logs: ") and _log_places(cloud, engine, ids) in lines[3]
    assert credentials_for(cloud["endpoint"])[1] not in summary  # no credentials
    table = DeltaTable(result["uri"], storage_options=cloud["storage"])
    rows = sorted(table.to_pyarrow_table().select(["id", "x2", "ds"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "x2": 3.0, "ds": "2026-11-28"},
        {"id": 2, "x2": 5.0, "ds": "2026-11-28"},
        {"id": 3, "x2": -2.0, "ds": "2026-11-28"},
    ]
    history = table.history()[0]
    assert history["airflow.dag_id"] == "cloud_dag" and history["airflow.task_id"] == second.task_id
    if engine == "glue":  # the "Job console" link: the Glue Studio page of this job run
        url = pushed[XCOM_JOB]["console_url"]
        assert url.startswith("https://us-east-1.console.aws.amazon.com/gluestudio/")
        assert ids["job_run_id"] in url


def test_deferrable_waits_in_the_triggerer_and_resumes_with_the_result(cloud):
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    op = _operator(cloud, "emr", deferrable=True)
    context = _context(op.task_id)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    kwargs = trigger.serialize()[1]
    assert credentials_for(cloud["endpoint"])[1] not in json.dumps(kwargs)  # connection id only
    assert kwargs["aws_conn_id"] == CONN

    async def first_event():
        return await anext(trigger.run())

    event = asyncio.run(first_event())
    assert event.payload["state"] == "SUCCEEDED"
    result = getattr(op, deferred.value.method_name)(context, event.payload)
    assert result["rows_written"] == 3
    # the transient cluster was torn down when the task resumed (aws_leak_check)


def test_killing_a_deferred_task_cancels_its_job_from_the_triggerer(cloud):
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    op = _operator(
        cloud, "emr", transform="etl_jobs:slow", transform_params={"seconds": 120}, deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(op.task_id))
    trigger = deferred.value.trigger
    handle = op._job[1]
    deadline = time.monotonic() + 60
    while op._job[0].poll(handle).raw != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    asyncio.run(trigger.on_kill())
    emr = aws_client("emr", cloud["endpoint"])
    state = emr.describe_cluster(ClusterId=handle.ids["cluster_id"])["Cluster"]["Status"]["State"]
    assert state.startswith("TERMINAT")
    assert not _table_exists(cloud, "emr")


def test_execution_timeout_during_the_wait_cancels_the_job(cloud):

    op = _operator(cloud, "glue", transform="etl_jobs:slow", transform_params={"seconds": 120})
    waited = []

    class TaskTimeout(BaseException):  # what Airflow's execution_timeout raises into the task
        pass

    def wait_then_time_out(engine, handle, **kwargs):
        waited.append(handle)
        deadline = time.monotonic() + 60
        while engine.poll(handle).raw != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        raise TaskTimeout()

    with (
        mock.patch("airflow_provider_dltrain.engines.lifecycle.wait", wait_then_time_out),
        pytest.raises(TaskTimeout),
    ):
        op.execute(_context(op.task_id))
    # the timeout struck while the operator waited on its running job, and the job was stopped
    (handle,) = waited
    run = aws_client("glue", cloud["endpoint"]).get_job_run(
        JobName=handle.ids["job_name"], RunId=handle.ids["job_run_id"]
    )["JobRun"]
    assert run["JobRunState"] in ("STOPPING", "STOPPED"), run["JobRunState"]
    # aws_leak_check: the Glue run was stopped, not left running
