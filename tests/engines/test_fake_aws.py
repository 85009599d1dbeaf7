"""The fake AWS runs submitted jobs for real, through plain boto3 (no project code).

Three scripts on moto S3: ``ok.py`` writes an object with env-only boto3 config, ``fail.py`` raises,
``sleep.py`` starts a child, records both pids and sleeps. Each service must reach its real terminal
states, show the error text where its API carries it, and kill the whole process tree on stop/cancel.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from engine_helpers import aws_client

OK_PY = """\
import argparse, json, os, sys, time
import boto3
start = time.time()
parser = argparse.ArgumentParser()
parser.add_argument("--bucket", required=True)
parser.add_argument("--key", required=True)
args, _ = parser.parse_known_args()
time.sleep(0.3)  # long enough for a poll to see the job RUNNING
body = {"argv": sys.argv[1:], "engine": os.environ.get("DLTRAIN_ENGINE"), "start": start, "end": time.time()}
boto3.client("s3").put_object(Bucket=args.bucket, Key=args.key, Body=json.dumps(body))
"""

FAIL_PY = """\
import sys
print("about to fail", file=sys.stderr)
raise ValueError("boom: the transform broke")
"""

SLEEP_PY = """\
import argparse, json, os, subprocess, sys, time
import boto3
parser = argparse.ArgumentParser()
parser.add_argument("--bucket", required=True)
parser.add_argument("--key", required=True)
args, _ = parser.parse_known_args()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
body = {"pid": os.getpid(), "child": child.pid}
boto3.client("s3").put_object(Bucket=args.bucket, Key=args.key, Body=json.dumps(body))
time.sleep(60)
"""

ROLE = "arn:aws:iam::123456789012:role/fake-aws-tests"


def wait_for(fetch: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 15.0) -> Any:
    """Poll ``fetch`` every 0.2 s until ``done(value)``; fail with the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s; last value: {value!r}")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """A zombie counts as gone: it has exited and only waits for its (re)parent to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


class Lake:
    def __init__(self, endpoint: str) -> None:
        self.s3 = aws_client("s3", endpoint)
        self.bucket = f"fake-aws-{uuid.uuid4().hex[:10]}"
        self.s3.create_bucket(Bucket=self.bucket)
        for name, body in (("ok.py", OK_PY), ("fail.py", FAIL_PY), ("sleep.py", SLEEP_PY)):
            self.s3.put_object(Bucket=self.bucket, Key=f"scripts/{name}", Body=body.encode())

    def script(self, name: str) -> str:
        return f"s3://{self.bucket}/scripts/{name}"

    def read(self, key: str) -> dict | None:
        try:
            return json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None

    def text(self, key: str) -> str:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()

    def wait_gone(self, pid_key: str) -> None:
        """The sleeper and its child are both dead within a few seconds of a stop/cancel."""
        pids = self.read(pid_key)
        assert pids is not None
        wait_for(lambda: [p for p in (pids["pid"], pids["child"]) if alive(p)], lambda left: not left, 5.0)


@pytest.fixture(scope="module")
def lake(fake_aws_endpoint) -> Lake:
    return Lake(fake_aws_endpoint)


def test_glue_runs_scripts_reports_errors_and_stops(aws_leak_check, lake):
    glue = aws_client("glue", aws_leak_check)
    runs = {}
    for name in ("ok", "fail", "sleep"):
        job = f"{name}-{uuid.uuid4().hex[:6]}"
        glue.create_job(
            Name=job,
            Role=ROLE,
            Command={"Name": "glueetl", "ScriptLocation": lake.script(f"{name}.py"), "PythonVersion": "3"},
            DefaultArguments={"--bucket": lake.bucket, "--key": "overridden"},
            NonOverridableArguments={"--fixed": "yes"},
        )
        runs[name] = (
            job,
            glue.start_job_run(JobName=job, Arguments={"--key": f"glue/{name}.json"})["JobRunId"],
        )

    def state(name: str) -> dict:
        job, run_id = runs[name]
        return glue.get_job_run(JobName=job, RunId=run_id)["JobRun"]

    def settled(run: dict) -> bool:
        return run["JobRunState"] not in ("STARTING", "RUNNING")

    assert wait_for(lambda: state("ok"), settled)["JobRunState"] == "SUCCEEDED"
    written = lake.read("glue/ok.json")
    assert written["engine"] == "glue"
    argv = written["argv"]
    assert argv[argv.index("--key") + 1] == "glue/ok.json"  # run Arguments override DefaultArguments
    assert argv[argv.index("--fixed") + 1] == "yes"
    assert argv[argv.index("--JOB_RUN_ID") + 1] == runs["ok"][1]
    assert {"--JOB_ID", "--job-bookmark-option"} <= set(argv)

    failed = wait_for(lambda: state("fail"), settled)
    assert failed["JobRunState"] == "FAILED"
    assert "ValueError: boom: the transform broke" in failed["ErrorMessage"]

    wait_for(lambda: lake.read("glue/sleep.json"), bool)
    assert state("sleep")["JobRunState"] == "RUNNING"
    job, run_id = runs["sleep"]
    response = glue.batch_stop_job_run(JobName=job, JobRunIds=[run_id])
    assert response["SuccessfulSubmissions"] == [{"JobName": job, "JobRunId": run_id}]
    assert wait_for(lambda: state("sleep"), settled, 5.0)["JobRunState"] == "STOPPED"
    lake.wait_gone("glue/sleep.json")


def _spark_step(name: str, script: str, args: list[str], on_failure: str = "CONTINUE") -> dict:
    submit = ["spark-submit", "--deploy-mode", "cluster", "--conf", "spark.x=1", "--archives", "env.tgz#env"]
    return {
        "Name": name,
        "ActionOnFailure": on_failure,
        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": [*submit, script, *args]},
    }


def _cluster(emr, steps: list[dict], keep_alive: bool, log_uri: str | None = None) -> str:
    extra = {"LogUri": log_uri} if log_uri else {}
    return emr.run_job_flow(
        Name=f"fake-{uuid.uuid4().hex[:6]}",
        ReleaseLabel="emr-7.5.0",
        Instances={
            "InstanceCount": 1,
            "MasterInstanceType": "m5.xlarge",
            "KeepJobFlowAliveWhenNoSteps": keep_alive,
        },
        Steps=steps,
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
        **extra,
    )["JobFlowId"]


def _step_state(emr, cluster_id: str, step_id: str) -> dict:
    return emr.describe_step(ClusterId=cluster_id, StepId=step_id)["Step"]["Status"]


def _cluster_state(emr, cluster_id: str) -> str:
    return emr.describe_cluster(ClusterId=cluster_id)["Cluster"]["Status"]["State"]


def test_emr_steps_run_in_order_fail_with_details_and_cancel(aws_leak_check, lake):
    emr = aws_client("emr", aws_leak_check)
    cluster_id = _cluster(emr, [], keep_alive=True, log_uri=f"s3://{lake.bucket}/emr-logs/")
    assert wait_for(lambda: _cluster_state(emr, cluster_id), lambda s: s == "WAITING") == "WAITING"
    args = ["--bucket", lake.bucket]
    steps = [
        _spark_step("ok", lake.script("ok.py"), [*args, "--key", "emr/ok.json"]),
        _spark_step("fail", lake.script("fail.py"), args),
        _spark_step("sleep", lake.script("sleep.py"), [*args, "--key", "emr/sleep.json"]),
    ]
    ok, fail, sleep = emr.add_job_flow_steps(JobFlowId=cluster_id, Steps=steps)["StepIds"]
    # Steps wait for their turn: while the first runs, the others are PENDING.
    assert _step_state(emr, cluster_id, sleep)["State"] == "PENDING"

    done = lambda s: s["State"] not in ("PENDING", "RUNNING")  # noqa: E731
    assert wait_for(lambda: _step_state(emr, cluster_id, ok), done)["State"] == "COMPLETED"
    written = lake.read("emr/ok.json")
    assert written["engine"] == "emr"
    assert written["argv"] == [*args, "--key", "emr/ok.json"]  # spark-submit options are not the script's

    failed = wait_for(lambda: _step_state(emr, cluster_id, fail), done)
    assert failed["State"] == "FAILED"
    assert "ValueError: boom" in failed["FailureDetails"]["Message"]
    assert "ValueError: boom" in failed["StateChangeReason"]["Message"]
    assert "ValueError: boom" in lake.text(f"emr-logs/{cluster_id}/steps/{fail}/stderr")

    wait_for(lambda: lake.read("emr/sleep.json"), bool)  # CONTINUE: the failure did not stop the next step
    assert _cluster_state(emr, cluster_id) == "RUNNING"
    infos = emr.cancel_steps(ClusterId=cluster_id, StepIds=[sleep])["CancelStepsInfoList"]
    assert infos == [{"StepId": sleep, "Status": "SUBMITTED", "Reason": ""}]
    assert wait_for(lambda: _step_state(emr, cluster_id, sleep), done, 5.0)["State"] == "CANCELLED"
    lake.wait_gone("emr/sleep.json")
    assert wait_for(lambda: _cluster_state(emr, cluster_id), lambda s: s == "WAITING") == "WAITING"
    emr.terminate_job_flows(JobFlowIds=[cluster_id])
    assert _cluster_state(emr, cluster_id) == "TERMINATED"


def test_emr_transient_cluster_runs_its_steps_in_order_then_terminates(aws_leak_check, lake):
    emr = aws_client("emr", aws_leak_check)
    args = ["--bucket", lake.bucket]
    steps = [
        _spark_step(f"s{i}", lake.script("ok.py"), [*args, "--key", f"transient/{i}.json"]) for i in (1, 2)
    ]
    cluster_id = _cluster(emr, steps, keep_alive=False)
    terminated = lambda s: s.startswith("TERMINATED")  # noqa: E731
    assert wait_for(lambda: _cluster_state(emr, cluster_id), terminated) == "TERMINATED"
    states = [s["Status"]["State"] for s in emr.list_steps(ClusterId=cluster_id)["Steps"]]
    assert states == ["COMPLETED", "COMPLETED"]
    first, second = lake.read("transient/1.json"), lake.read("transient/2.json")
    assert first["end"] <= second["start"]  # sequential, in submission order


def test_emr_failed_step_with_terminate_cluster_cancels_the_rest(aws_leak_check, lake):
    emr = aws_client("emr", aws_leak_check)
    steps = [
        _spark_step(
            "fail", lake.script("fail.py"), ["--bucket", lake.bucket], on_failure="TERMINATE_CLUSTER"
        ),
        _spark_step("ok", lake.script("ok.py"), ["--bucket", lake.bucket, "--key", "never.json"]),
    ]
    cluster_id = _cluster(emr, steps, keep_alive=True)
    terminated = lambda s: s.startswith("TERMINATED")  # noqa: E731
    assert wait_for(lambda: _cluster_state(emr, cluster_id), terminated) == "TERMINATED_WITH_ERRORS"
    states = [s["Status"]["State"] for s in emr.list_steps(ClusterId=cluster_id)["Steps"]]
    assert sorted(states) == ["CANCELLED", "FAILED"]
    assert lake.read("never.json") is None


def test_emr_terminate_job_flows_kills_the_running_step(aws_leak_check, lake):
    emr = aws_client("emr", aws_leak_check)
    args = ["--bucket", lake.bucket]
    steps = [
        _spark_step("sleep", lake.script("sleep.py"), [*args, "--key", "terminate/sleep.json"]),
        _spark_step("ok", lake.script("ok.py"), [*args, "--key", "terminate/never.json"]),
    ]
    cluster_id = _cluster(emr, steps, keep_alive=True)
    wait_for(lambda: lake.read("terminate/sleep.json"), bool)
    emr.terminate_job_flows(JobFlowIds=[cluster_id])
    assert _cluster_state(emr, cluster_id) == "TERMINATED"
    states = [s["Status"]["State"] for s in emr.list_steps(ClusterId=cluster_id)["Steps"]]
    assert states == ["CANCELLED", "CANCELLED"]
    lake.wait_gone("terminate/sleep.json")
    with pytest.raises(botocore.exceptions.ClientError, match="may not be modified"):
        emr.add_job_flow_steps(JobFlowId=cluster_id, Steps=steps[1:])


def test_emr_serverless_runs_reports_errors_and_cancels(aws_leak_check, lake):
    es = aws_client("emr-serverless", aws_leak_check)
    app = es.create_application(name="fake", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]
    assert es.get_application(applicationId=app)["application"]["state"] == "CREATED"
    logs = {
        "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": f"s3://{lake.bucket}/es-logs/"}}
    }
    runs = {}
    for name in ("ok", "fail", "sleep"):
        driver = {"entryPoint": lake.script(f"{name}.py")}
        driver["entryPointArguments"] = ["--bucket", lake.bucket, "--key", f"es/{name}.json"]
        runs[name] = es.start_job_run(
            applicationId=app,
            executionRoleArn=ROLE,
            jobDriver={"sparkSubmit": driver},
            configurationOverrides=logs,
        )["jobRunId"]

    def run(name: str) -> dict:
        return es.get_job_run(applicationId=app, jobRunId=runs[name])["jobRun"]

    done = lambda r: r["state"] not in ("SUBMITTED", "PENDING", "SCHEDULED", "RUNNING")  # noqa: E731
    assert wait_for(lambda: run("ok"), done)["state"] == "SUCCESS"
    assert lake.read("es/ok.json")["engine"] == "emr_serverless"

    failed = wait_for(lambda: run("fail"), done)
    assert failed["state"] == "FAILED"
    assert "ValueError: boom" in failed["stateDetails"]
    log_key = f"es-logs/applications/{app}/jobs/{runs['fail']}/SPARK_DRIVER/stderr"
    assert "ValueError: boom" in lake.text(log_key)

    wait_for(lambda: lake.read("es/sleep.json"), bool)
    assert run("sleep")["state"] == "RUNNING"
    es.cancel_job_run(applicationId=app, jobRunId=runs["sleep"])
    assert wait_for(lambda: run("sleep"), done, 5.0)["state"] == "CANCELLED"
    lake.wait_gone("es/sleep.json")
    es.cancel_job_run(applicationId=app, jobRunId=runs["ok"])  # a finished run stays as it ended
    assert run("ok")["state"] == "SUCCESS"
    es.delete_application(applicationId=app)


def test_sagemaker_stop_training_job_exists(fake_aws_endpoint):
    sm = aws_client("sagemaker", fake_aws_endpoint)
    name = f"tj-{uuid.uuid4().hex[:6]}"
    sm.create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={"TrainingImage": "img:latest", "TrainingInputMode": "File"},
        RoleArn=ROLE,
        OutputDataConfig={"S3OutputPath": "s3://models/out"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
    with pytest.raises(botocore.exceptions.ClientError, match="Could not find training job"):
        sm.stop_training_job(TrainingJobName="no-such-job")
    # a job that is not a dltrain job completes at once (as moto made it); a finished job cannot be stopped
    wait_for(
        lambda: sm.describe_training_job(TrainingJobName=name),
        lambda j: j["TrainingJobStatus"] == "Completed",
    )
    with pytest.raises(botocore.exceptions.ClientError, match="in status Completed"):
        sm.stop_training_job(TrainingJobName=name)
