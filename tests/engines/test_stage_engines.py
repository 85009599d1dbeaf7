"""SparkToDeltaOperator with engine=sagemaker_processing / ec2: Airflow -> the engine -> fake AWS (a
processing job run as a process, an instance whose user data runs) -> the job script -> Delta on S3."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from unittest import mock

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.lake.storage import s3_storage_options
from airflow_provider_dltrain.testing.fake_aws import INSTANCE_PROFILE
from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for, leaks

CONN = "aws_fake_stage"
ENGINES = ["sagemaker_processing", "ec2"]
ROLE = "arn:aws:iam::123456789012:role/SageMakerProcessingRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dltrain-spark:3.5"
# every test but the request's starts cloud jobs on the fake AWS: not for make test-quick
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def cloud(fake_aws_endpoint):
    """One bucket with a CSV input and an Airflow aws connection to the fake, for the whole module."""
    endpoint = fake_aws_endpoint
    conn = json.loads(connection_json(endpoint))  # the fake's per-start keys
    bucket = f"stage-{uuid.uuid4().hex[:10]}"
    s3 = aws_client("s3", endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="landing/raw.csv", Body=b"id,x\n1,1.5\n2,2.5\n3,-1\n")
    options = {
        "sagemaker_processing": {
            "staging_uri": f"s3://{bucket}/staging",
            "role": ROLE,
            "image_uri": IMAGE,
            "max_runtime_s": 900,
        },
        "ec2": {
            "staging_uri": f"s3://{bucket}/staging",
            "image_id": "ami-0abcdef1234567890",
            "instance_profile": INSTANCE_PROFILE,
            "max_minutes": 30,
        },
    }
    key, secret = credentials_for(endpoint)
    storage = s3_storage_options(access_key=key, secret_key=secret, region="us-east-1", endpoint_url=endpoint)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(conn))
        yield {"endpoint": endpoint, "bucket": bucket, "options": options, "storage": storage}


@pytest.fixture
def stage_cloud(cloud):
    """``cloud``; after the test, fails if a processing job, an instance or any other resource is alive."""
    yield cloud
    left = leaks(cloud["endpoint"])
    assert not left, "cloud resources left running:\n  " + "\n  ".join(left)


def _operator(cloud, engine, table, transform="etl_jobs:double", **kwargs):
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    bucket = cloud["bucket"]
    return SparkToDeltaOperator(
        task_id=f"{table}_{engine}",
        table_uri=f"s3://{bucket}/lake/{table}_{engine}",
        partition={"ds": "2026-11-28"},
        transform=transform,
        inputs={
            "raw": {"path": f"s3://{bucket}/landing/raw.csv", "format": "csv", "options": {"header": "true"}}
        },
        engine=engine,
        engine_options=cloud["options"][engine],
        aws_conn_id=CONN,
        poll_interval=0.3,
        **kwargs,
    )


def _context(task_id, try_number=1):
    ti = mock.MagicMock(
        dag_id="stage_dag", run_id="manual__2026-11-28", task_id=task_id, try_number=try_number, map_index=-1
    )
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id="stage_dag"),
        "run_id": "manual__2026-11-28",
        "logical_date": None,
        "outlet_events": {},
    }


def _jobs(cloud, engine):
    """How many jobs were ever submitted for ``engine`` (processing jobs, or instances)."""
    if engine == "sagemaker_processing":
        return len(
            aws_client("sagemaker", cloud["endpoint"]).list_processing_jobs()["ProcessingJobSummaries"]
        )
    reservations = aws_client("ec2", cloud["endpoint"]).describe_instances()["Reservations"]
    return sum(len(r["Instances"]) for r in reservations)


def _table_exists(cloud, op):
    s3 = aws_client("s3", cloud["endpoint"])
    prefix = op.table_uri.split(cloud["bucket"] + "/", 1)[1] + "/_delta_log/"
    return bool(s3.list_objects_v2(Bucket=cloud["bucket"], Prefix=prefix).get("KeyCount"))


def _job_state(cloud, engine, handle):
    if engine == "sagemaker_processing":
        sm = aws_client("sagemaker", cloud["endpoint"])
        return sm.describe_processing_job(ProcessingJobName=handle.ids["job_name"])["ProcessingJobStatus"]
    ec2 = aws_client("ec2", cloud["endpoint"])
    (reservation,) = ec2.describe_instances(InstanceIds=handle.ids["instance_ids"])["Reservations"]
    return reservation["Instances"][0]["State"]["Name"]


def _running(op, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = op._job
        if job is not None and job[0].poll(job[1]).raw in {"InProgress", "running"}:
            return job[1]
        time.sleep(0.2)
    raise AssertionError("the job never ran")


STOPPED = {"sagemaker_processing": "Stopped", "ec2": "terminated"}


class WorkerDied(BaseException):
    """What a dying worker leaves: no ``finally`` of the operator runs."""


def _crash(self, engine_, handle, event):
    raise WorkerDied()


def test_the_processing_request_is_the_one_pysparkprocessor_sends():
    """``PySparkProcessor.run(submit_app=...)``'s request: the SDK's field names and defaults."""
    from airflow_provider_dltrain.engines import RunIdentity, RunSpec
    from airflow_provider_dltrain.engines.base import StagedRun
    from airflow_provider_dltrain.engines.sagemaker_processing import SageMakerProcessingEngine

    engine = SageMakerProcessingEngine(
        lambda service: mock.MagicMock(), {"staging_uri": "s3://b/st", "role": ROLE, "image_uri": IMAGE}
    )
    identity = RunIdentity(dag_id="d", run_id="r", task_id="ingest", try_number=2)
    spec = RunSpec(stage="etl", table_uri="s3://b/t", partition={"ds": "d"}, params={}, identity=identity)
    script = "s3://b/st/code/job_script-abc.py"
    staged = StagedRun(spec, "s3://b/st/runs/k/2/spec.json", script, "s3://b/st/code/c.zip", "s3://b/r.json")
    request = engine.request(staged)
    assert request["ProcessingJobName"] == identity.job_name and len(identity.job_name) <= 63
    assert request["ProcessingResources"] == {
        "ClusterConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30}
    }
    assert request["AppSpecification"] == {
        "ImageUri": IMAGE,
        "ContainerArguments": ["--spec", staged.spec_uri, "--code", staged.code_uri],
        "ContainerEntrypoint": ["smspark-submit", "/opt/ml/processing/input/code/job_script-abc.py"],
    }
    (code,) = request["ProcessingInputs"]
    assert code["InputName"] == "code" and code["S3Input"]["S3Uri"] == script
    assert code["S3Input"]["LocalPath"] == "/opt/ml/processing/input/code"
    assert request["RoleArn"] == ROLE and request["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200}
    assert request["Environment"] == {"DLTRAIN_ENGINE": "sagemaker_processing"}
    assert {t["Key"]: t["Value"] for t in request["Tags"]} == identity.tags()


@pytest.fixture(scope="module")
def spark_runs(cloud):
    """Every Spark job of this module at once (Spark's start-up dominates; two cores share four JVMs).

    Per engine: try 1 of ``t`` submits and its worker dies; then, side by side, try 2 re-attaches and
    waits while a second task's transform refuses its input. ``{engine: {...}}`` of what each saw.
    """
    from airflow_provider_dltrain.operators.engine_run import EngineRun

    runs: dict[str, dict] = {engine: {"before": _jobs(cloud, engine)} for engine in ENGINES}
    for engine in ENGINES:
        first = _operator(cloud, engine, "t", transform="etl_jobs:slow", transform_params={"seconds": 1})
        with mock.patch.object(EngineRun, "_finish", _crash), pytest.raises(WorkerDied):
            first.execute(_context(first.task_id, try_number=1))

    def run(engine, key, op, context):
        try:
            runs[engine][key] = op.execute(context)
        except Exception as err:
            runs[engine][key] = err

    task_log, records = logging.getLogger("dltrain.tests.stage"), []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    task_log.addHandler(handler)
    task_log.setLevel(logging.INFO)
    threads = []
    for engine in ENGINES:
        retry = _operator(cloud, engine, "t", transform="etl_jobs:slow", transform_params={"seconds": 1})
        refused = _operator(
            cloud, engine, "bad", transform="etl_jobs:refused", transform_params={"why": "x is text"}
        )
        runs[engine].update(retry_context=_context(retry.task_id, try_number=2), refused_op=refused)
        threads += [
            threading.Thread(target=run, args=(engine, "retry", retry, runs[engine]["retry_context"])),
            threading.Thread(target=run, args=(engine, "refused", refused, _context(refused.task_id))),
        ]
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    try:
        with mock.patch.object(SparkToDeltaOperator, "log", task_log):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
    finally:
        task_log.removeHandler(handler)
    assert not any(t.is_alive() for t in threads), "a Spark job did not end within 5 minutes"
    for engine in ENGINES:
        runs[engine]["log"] = [r.getMessage() for r in records if f"{engine} job" in r.getMessage()]
    left = leaks(cloud["endpoint"])
    assert not left, "cloud resources left running:\n  " + "\n  ".join(left)
    return runs


@slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_retry_after_a_worker_crash_reattaches_to_the_job_which_commits_the_partition(
    spark_runs, cloud, engine
):
    """Try 1 submitted and its worker died; try 2 found the job by name and waited for it; the job
    committed the partition, the operator returns the DeltaRef, logs the job's summary and pushes the
    console link."""
    from deltalake import DeltaTable

    from airflow_provider_dltrain.operators.engine_run import XCOM_JOB

    run = spark_runs[engine]
    result = run["retry"]
    assert not isinstance(result, BaseException), result
    assert _jobs(cloud, engine) == run["before"] + 2  # one job per task instance (t, bad), whatever the tries
    assert result["version"] == 0 and result["committed"] is True and result["rows_written"] == 3
    assert any(m.startswith(f"re-attaching to {engine} job") for m in run["log"])
    (summary,) = [m for m in run["log"] if m.startswith(f"{engine} job") and " succeeded" in m]
    lines = summary.splitlines()
    assert lines[1:3] == [f"  table {result['uri']} version 0: committed", "  rows: 3 written, 0 quarantined"]
    pushed = {c.kwargs["key"]: c.kwargs["value"] for c in run["retry_context"]["ti"].xcom_push.call_args_list}
    job = pushed[XCOM_JOB]
    if engine == "sagemaker_processing":
        assert "/aws/sagemaker/ProcessingJobs" in lines[3] and job["ids"]["job_name"] in lines[3]
        assert job["console_url"].endswith(f"#/processing-jobs/{job['ids']['job_name']}")
    else:
        assert lines[3].endswith("/logs/node-0.log")
        assert job["console_url"].endswith(f"#Instances:tag:dltrain:job={job['ids']['job_name']}")
    assert credentials_for(cloud["endpoint"])[1] not in summary  # no credentials
    table = DeltaTable(result["uri"], storage_options=cloud["storage"])
    rows = sorted(table.to_pyarrow_table().select(["id", "x2"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "x2": 3.0}, {"id": 2, "x2": 5.0}, {"id": 3, "x2": -2.0}]


@slow
@pytest.mark.parametrize("engine", ENGINES)
def test_an_unchanged_rerun_submits_no_job(spark_runs, stage_cloud, engine):
    jobs = _jobs(stage_cloud, engine)
    op = _operator(stage_cloud, engine, "t", transform="etl_jobs:slow", transform_params={"seconds": 1})
    again = op.execute(_context(op.task_id, try_number=3))
    assert again["version"] == 0 and again["committed"] is False
    assert _jobs(stage_cloud, engine) == jobs  # the re-run check ran before any engine


@slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_transform_refusing_its_input_fails_the_task_unretried_with_the_jobs_message_and_commits_nothing(
    spark_runs, cloud, engine
):
    from airflow.sdk.exceptions import AirflowFailException

    failed = spark_runs[engine]["refused"]
    assert isinstance(failed, AirflowFailException), failed  # a user error: Airflow does not retry it
    assert "transform refused the input: x is text" in str(failed)
    assert "Nothing was committed" in str(failed)
    assert not _table_exists(cloud, spark_runs[engine]["refused_op"])
    if engine == "sagemaker_processing":  # SageMaker's own words for a container that failed
        sm = aws_client("sagemaker", cloud["endpoint"])
        (job,) = [
            j
            for j in sm.list_processing_jobs()["ProcessingJobSummaries"]
            if j["ProcessingJobName"].startswith("dltrain-bad")
        ]
        described = sm.describe_processing_job(ProcessingJobName=job["ProcessingJobName"])
        assert described["ProcessingJobStatus"] == "Failed"
        assert described["FailureReason"].startswith("AlgorithmError: ")


@slow
@pytest.mark.parametrize("engine", ENGINES)
def test_killing_the_task_stops_the_job(stage_cloud, engine):
    op = _operator(
        stage_cloud, engine, "killed", transform="etl_jobs:slow", transform_params={"seconds": 120}
    )
    errors: list[BaseException] = []

    def execute():
        try:
            op.execute(_context(op.task_id))
        except Exception as err:
            errors.append(err)

    worker = threading.Thread(target=execute)
    worker.start()
    handle = _running(op)
    op.on_kill()
    worker.join(60)
    assert not worker.is_alive() and errors, "the task kept waiting after on_kill"
    assert _job_state(stage_cloud, engine, handle) == STOPPED[engine]
    assert not _table_exists(stage_cloud, op)


@slow
@pytest.mark.parametrize("engine", ["sagemaker_processing"])  # the trigger polls every engine alike
def test_a_deferred_task_reattaches_on_retry_and_a_kill_in_the_triggerer_stops_the_job(stage_cloud, engine):
    from airflow.sdk.exceptions import TaskDeferred

    cloud = stage_cloud
    before = _jobs(cloud, engine)
    ops = [
        _operator(
            cloud,
            engine,
            "deferred",
            transform="etl_jobs:slow",
            transform_params={"seconds": 120},
            deferrable=True,
        )
        for _ in range(2)
    ]
    deferred = []
    for try_number, op in enumerate(ops, start=1):
        with pytest.raises(TaskDeferred) as raised:
            op.execute(_context(op.task_id, try_number=try_number))
        deferred.append(raised.value.trigger)
    # the second try found the deferred first try's job: one job, one handle
    assert _jobs(cloud, engine) == before + 1
    assert deferred[0].handle["ids"] == deferred[1].handle["ids"]
    assert credentials_for(cloud["endpoint"])[1] not in json.dumps(deferred[1].serialize()[1])
    handle = ops[1]._job[1]
    _running(ops[1])
    asyncio.run(deferred[1].on_kill())
    assert _job_state(cloud, engine, handle) == STOPPED[engine]


@slow
@pytest.mark.parametrize("engine", ENGINES)
def test_the_reaper_stops_the_job_of_a_task_that_died(stage_cloud, engine):
    from airflow_provider_dltrain.engines.reaper import reap
    from airflow_provider_dltrain.operators.engine_run import EngineRun

    cloud = stage_cloud
    op = _operator(cloud, engine, "orphan", transform="etl_jobs:slow", transform_params={"seconds": 120})
    with mock.patch.object(EngineRun, "_finish", _crash), pytest.raises(WorkerDied):
        op.execute(_context(op.task_id))
    handle = op._job[1]
    # only this test's task counts as dead: other tasks' jobs on the shared fake are left alone
    outcomes = reap(
        lambda service: aws_client(service, cloud["endpoint"]), lambda who: who.task_id != op.task_id
    )
    (ours,) = [o for o in outcomes if o.resource.identity.task_id == op.task_id]
    assert ours.action == {"sagemaker_processing": "stopped", "ec2": "terminated"}[engine]
    assert _job_state(cloud, engine, handle) == STOPPED[engine]


@slow
@pytest.mark.parametrize("engine", ["ec2"])  # the same cancel as on_kill's, whatever the engine
def test_execution_timeout_during_the_wait_stops_the_job(stage_cloud, engine):
    cloud = stage_cloud
    op = _operator(cloud, engine, "timeout", transform="etl_jobs:slow", transform_params={"seconds": 120})
    waited = []

    class TaskTimeout(BaseException):  # what Airflow's execution_timeout raises into the task
        pass

    def wait_then_time_out(engine_, handle, **kwargs):
        waited.append(handle)
        raise TaskTimeout()

    with (
        mock.patch("airflow_provider_dltrain.engines.lifecycle.wait", wait_then_time_out),
        pytest.raises(TaskTimeout),
    ):
        op.execute(_context(op.task_id))
    (handle,) = waited
    assert _job_state(cloud, engine, handle) in (STOPPED[engine], "shutting-down")
