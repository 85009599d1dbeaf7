"""A per-run EC2 cluster on two hosts: each instance is a container of the training image on the
fake's own network, with the address EC2 gave it. Its user data runs as launched (the master's
address and port are the real ones), the launcher reaches the other host over the network (torchrun's
rendezvous; horovodrun's ``mpirun`` over SSH), and terminating an instance removes its container.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from engine_helpers import aws_client, staged_ec2_run

from airflow_provider_dltrain.engines import outcome, wait
from airflow_provider_dltrain.engines.ec2 import Ec2Engine, Ec2Options
from airflow_provider_dltrain.testing.local_executor import labelled

pytestmark = [pytest.mark.slow, pytest.mark.containers]


@pytest.fixture
def cluster(containers_aws):
    endpoint = containers_aws.endpoint_url
    bucket = f"hosts-{uuid.uuid4().hex[:10]}"
    aws_client("s3", endpoint).create_bucket(Bucket=bucket)
    yield {"endpoint": endpoint, "bucket": bucket, "instance": containers_aws.instance}


def _run_on_two_hosts(env, **options):
    """Launch, wait, read the result; returns it with the instances' addresses and what docker saw."""
    engine = Ec2Engine(
        lambda service: aws_client(service, env["endpoint"]),
        Ec2Options(
            staging_uri=f"s3://{env['bucket']}/staging",
            image_id="ami-0abcdef1234567890",
            max_minutes=30,
            **options,
        ),
    )
    handle = engine.submit(staged_ec2_run(env["endpoint"], env["bucket"], {}, dag_id="hosts_dag"))
    try:
        ec2 = aws_client("ec2", env["endpoint"])
        described = ec2.describe_instances(InstanceIds=handle.ids["instance_ids"])
        ips = [i["PrivateIpAddress"] for r in described["Reservations"] for i in r["Instances"]]
        deadline = time.monotonic() + 60
        while len(containers := labelled("ps", env["instance"])) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the fake boots an instance a moment after RunInstances
        seen = {}
        for name in containers:  # each instance is a container with the address EC2 handed out
            inspect = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
            networks = json.loads(inspect.stdout)[0]["NetworkSettings"]["Networks"]
            seen[name] = {n["IPAddress"] for n in networks.values()}
        status = wait(engine, handle, poll_interval=0.5, timeout=240)
        result = outcome(engine, handle, status)
    finally:
        engine.teardown(handle)
    return result, ips, seen


def _no_container_left(instance: str, timeout: float = 30.0) -> bool:
    """Whether the terminated instances' containers are gone (docker removes them a moment after)."""
    deadline = time.monotonic() + timeout
    while labelled("ps", instance):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_torchrun_across_two_hosts_meets_at_rank0s_address(cluster):
    result, ips, seen = _run_on_two_hosts(cluster, launcher="torchrun")
    assert len(set(ips)) == 2 and not {"127.0.0.1"} & set(ips)
    assert sorted(a for addresses in seen.values() for a in addresses) == sorted(ips), seen
    assert result["world"] == 2 and result["sum"] == 3.0 and result["controller"] == "torch"
    assert result["hosts"] == sorted(f"ip-{ip.replace('.', '-')}" for ip in ips), "one rank on each host"
    assert _no_container_left(cluster["instance"]), "terminated instances leave no container"


def test_horovodrun_across_two_hosts_through_mpi_over_ssh(cluster):
    result, ips, _ = _run_on_two_hosts(cluster, launcher="horovodrun", horovod_controller="mpi")
    assert result["world"] == 2 and result["sum"] == 3.0
    assert result["controller"] == "mpi", "the ranks must have been started by mpirun, not Gloo's runner"
    assert result["hosts"] == sorted(f"ip-{ip.replace('.', '-')}" for ip in ips), "one rank on each host"
    assert _no_container_left(cluster["instance"]), "terminated instances leave no container"
