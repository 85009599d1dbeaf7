"""The EC2 engine against the fake AWS: two instances whose user data really runs torchrun over
loopback, the request and the user data EC2 receives, failure, cancel, crash + re-attach, teardown."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid

import pytest
from engine_helpers import aws_client, aws_connection, staged_ec2_run

from airflow_provider_dltrain.engines import JobFailedError, RunIdentity, outcome, wait
from airflow_provider_dltrain.engines.base import StagedRun
from airflow_provider_dltrain.engines.ec2 import Ec2Engine, Ec2Options
from airflow_provider_dltrain.engines.ec2_node import horovodrun_argv, torchrun_argv
from airflow_provider_dltrain.engines.ec2_plan import USER_DATA_LIMIT, parse_plan


@pytest.fixture
def ec2_env(aws_leak_check):
    endpoint = aws_leak_check
    bucket = f"ec2-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    return {"endpoint": endpoint, "bucket": bucket, "clients": lambda service: aws_client(service, endpoint)}


def _engine(env, **options) -> Ec2Engine:
    options.setdefault("image_id", "ami-0abcdef1234567890")
    return Ec2Engine(
        env["clients"], Ec2Options(staging_uri=f"s3://{env['bucket']}/staging", max_minutes=30, **options)
    )


def _staged(env, params, task_id="train", try_number=1) -> StagedRun:
    return staged_ec2_run(env["endpoint"], env["bucket"], params, task_id=task_id, try_number=try_number)


def _instances(env, job):
    ec2 = aws_client("ec2", env["endpoint"])
    out = ec2.describe_instances(Filters=[{"Name": "tag:dltrain:job", "Values": [job]}])
    return [i for r in out["Reservations"] for i in r["Instances"]]


def _plan(env, instance_id):
    ec2 = aws_client("ec2", env["endpoint"])
    data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    return parse_plan(base64.b64decode(data).decode())


def test_user_data_is_valid_bash_with_dead_man_switch_and_plan_for_both_launchers(ec2_env, tmp_path):
    for launcher in ("torchrun", "horovodrun"):
        engine = _engine(ec2_env, launcher=launcher, setup_commands=["source /opt/venv/bin/activate"])
        plan = engine._plan(
            "dltrain-train-abc-t1",
            1,
            "10.0.0.5",
            {"script_uri": "s3://b/e.py", "args": ["--spec", "s3://b/s.json"]},
            "s3://b/run",
        )
        text = engine.user_data(plan, "ssh-ed25519 AAAAC3Nza dltrain" if launcher == "horovodrun" else None)
        script = tmp_path / f"{launcher}.sh"
        script.write_text(text)
        subprocess.run(["bash", "-n", str(script)], check=True)
        commands = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        assert commands[0:2] == ["set -u", "shutdown -h +30"], "the dead-man switch must come first"
        assert text.rstrip().endswith("shutdown -h now")
        assert len(text.encode()) < USER_DATA_LIMIT
        assert parse_plan(text)["master_addr"] == "10.0.0.5" and parse_plan(text)["node_rank"] == 1
        assert ("authorized_keys" in text) == (launcher == "horovodrun")
    plan = json.loads(plan.to_json()) | {"python": "/usr/bin/python3", "procs_per_node": 2}
    assert torchrun_argv({**plan, "launcher": "torchrun"}, "e.py")[3:8] == [
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=2",
        "--master-addr=10.0.0.5",
        "--master-port=29500",
    ]
    assert horovodrun_argv(plan, "e.py", ["10.0.0.5", "10.0.0.6"]) == [
        "horovodrun",
        "--gloo",
        "-np",
        "4",
        "-H",
        "10.0.0.5:2,10.0.0.6:2",
        "-p",
        "22",
        "--ssh-identity-file",
        "/root/.ssh/dltrain_id_ed25519",
        "--network-interface",
        "eth0",
        "/usr/bin/python3",
        "e.py",
        "--spec",
        "s3://b/s.json",
    ]


def test_ami_defaults_to_the_ssm_public_parameter(ec2_env):
    image = Ec2Engine(
        ec2_env["clients"], Ec2Options(staging_uri=f"s3://{ec2_env['bucket']}/s")
    ).resolve_image()
    assert image.startswith("ami-")


def test_two_instances_run_torchrun_over_loopback_and_end_terminated(ec2_env):
    engine = _engine(ec2_env, region="us-east-1")
    staged = _staged(ec2_env, {})
    handle = engine.submit(staged)
    try:
        ec2 = aws_client("ec2", ec2_env["endpoint"])
        first = handle.ids["instance_ids"][0]
        behaviour = ec2.describe_instance_attribute(
            InstanceId=first, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        instances = {i["InstanceId"]: i for i in _instances(ec2_env, handle.ids["job_name"])}
        rank0_ip = instances[first]["PrivateIpAddress"]
        assert _plan(ec2_env, handle.ids["instance_ids"][1])["master_addr"] == rank0_ip
        tags = {t["Key"]: t["Value"] for t in instances[first]["Tags"]}
        assert tags["dltrain:run_id"] == staged.spec.identity.run_id and tags["dltrain:node_rank"] == "0"
        status = wait(engine, handle, poll_interval=0.3, timeout=120)
        result = outcome(engine, handle, status)
        assert {k: result[k] for k in ("world", "sum", "node", "controller")} == {
            "world": 2,
            "sum": 3.0,
            "node": "0",
            "controller": "torch",
        }
    finally:
        engine.teardown(handle)
    assert {i["State"]["Name"] for i in _instances(ec2_env, handle.ids["job_name"])} == {"terminated"}


def test_a_failing_rank_fails_the_job_with_its_message(ec2_env):
    engine = _engine(ec2_env)
    handle = engine.submit(_staged(ec2_env, {"fail": "NaN loss"}))
    try:
        status = wait(engine, handle, poll_interval=0.3, timeout=120)
        with pytest.raises(JobFailedError, match="refused the batch: NaN loss"):
            outcome(engine, handle, status)
    finally:
        engine.teardown(handle)


def test_cancel_terminates_every_instance_and_its_processes(ec2_env):
    engine = _engine(ec2_env)
    handle = engine.submit(_staged(ec2_env, {"sleep": 300}))
    try:
        deadline = time.monotonic() + 60  # cancel a job that has started, not one still launching
        while (state := engine.poll(handle).state) == "PENDING" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state == "RUNNING"
    finally:
        engine.cancel(handle)
    status = engine.poll(handle)
    assert status.state == "FAILED" and "terminated before the job finished" in status.message


def test_retry_after_a_crash_mid_launch_completes_the_one_cluster(ec2_env, monkeypatch):
    engine = _engine(ec2_env)
    staged = _staged(ec2_env, {})
    launched = []
    original = engine._launch

    def crash_after_rank0(plan, *args):
        if plan.node_rank > 0:
            raise ConnectionError("worker died while launching")
        launched.append(plan.node_rank)
        return original(plan, *args)

    monkeypatch.setattr(engine, "_launch", crash_after_rank0)
    with pytest.raises(ConnectionError):
        engine.submit(staged)
    monkeypatch.undo()
    retry = RunIdentity(**{**staged.spec.identity.__dict__, "try_number": 2})
    handle = _engine(ec2_env).find(retry)
    try:
        assert handle is not None and handle.ids["job_name"] == staged.spec.identity.job_name
        assert len(_instances(ec2_env, handle.ids["job_name"])) == 2, "one cluster, never a second"
        assert _engine(ec2_env).find(retry).ids == handle.ids
        plans = [_plan(ec2_env, i) for i in handle.ids["instance_ids"]]
        assert [p["node_rank"] for p in plans] == [0, 1] and plans[1]["entry"] == plans[0]["entry"]
    finally:
        engine.teardown(
            handle if handle else engine._handle(staged.spec.identity.job_name, [], staged.result_uri)
        )


def _tagged_instances(env, identity, count=1):
    """Instances tagged as the engine tags them, with no node plan: nothing boots on them."""
    ec2 = aws_client("ec2", env["endpoint"])
    tags = [{"Key": k, "Value": v} for k, v in identity.tags().items()] if identity else []
    request = {"ImageId": "ami-0abcdef1234567890", "MinCount": count, "MaxCount": count}
    if tags:
        request["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tags}]
    return [i["InstanceId"] for i in ec2.run_instances(**request)["Instances"]]


def test_reaper_and_teardown_task_terminate_only_instances_of_their_task(ec2_env, monkeypatch):
    from airflow_provider_dltrain.engines.reaper import find_resources, reap
    from airflow_provider_dltrain.operators.ec2 import Ec2ClusterTeardownOperator

    dead = RunIdentity(dag_id="ec2_dag", run_id="r-dead", task_id="train")
    live = RunIdentity(dag_id="ec2_dag", run_id="r-live", task_id="train")
    dead_ids, live_ids = _tagged_instances(ec2_env, dead, 2), _tagged_instances(ec2_env, live)
    untagged = _tagged_instances(ec2_env, None)
    ec2 = aws_client("ec2", ec2_env["endpoint"])
    try:
        found = {r.id: r for r in find_resources(ec2_env["clients"]) if r.kind == "ec2_instance"}
        assert set(found) == {*dead_ids, *live_ids} and found[dead_ids[0]].identity == dead
        outcomes = {o.resource.id: o.action for o in reap(ec2_env["clients"], lambda who: who == live)}
        assert outcomes == {dead_ids[0]: "terminated", dead_ids[1]: "terminated", live_ids[0]: "kept"}

        monkeypatch.setenv("AIRFLOW_CONN_AWS_FAKE", aws_connection(ec2_env["endpoint"]))
        teardown = Ec2ClusterTeardownOperator(
            task_id="ec2_teardown", train_task_id="train", aws_conn_id="aws_fake"
        )
        ti = type("TI", (), {"dag_id": "ec2_dag", "run_id": "r-live", "task_id": "ec2_teardown"})()
        assert teardown.execute({"ti": ti}) == live_ids
        states = {
            i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        }
        assert states[untagged[0]] == "running", "an instance without dltrain tags is never touched"
    finally:
        ec2.terminate_instances(InstanceIds=untagged)
