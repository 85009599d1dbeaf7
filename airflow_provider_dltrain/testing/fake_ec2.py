"""EC2 on the fake AWS: each launched instance's user data really runs, as a local bash process.

moto records ``RunInstances`` and nothing boots. For every new instance whose user data holds a
dltrain node plan, the executor writes that user data to a work directory and runs it with ``bash``,
changing only what a single machine cannot have: the master's address (moto's private IPs are not
reachable, so ``127.0.0.1``) and its port (a free one per cluster, so tests do not collide), the
node directory, the SSH directory and the Python (``DLTRAIN_*`` variables the script reads). The
``shutdown`` command is a stub on ``PATH`` that records its arguments; when the script has asked for
``shutdown -h now`` and exits, the instance stops or, with ``InstanceInitiatedShutdownBehavior``
``terminate``, is terminated - what EC2 does. Terminating an instance (the control plane's
teardown, the reaper) kills its process group.

In container mode (the fake started with images) every instance is a container of the ``train`` image
on a Docker network of this fake (one /24 subnet, picked free), with its own address: moto hands out
the network's addresses as the instances' ``PrivateIpAddress``, so the engine's master address and
Horovod's host list are real addresses of real hosts, and nothing in the user data is rewritten. The
container boots as an AMI would (sshd up, then the user data as root), reaches the fake AWS on the
network's gateway (a second listener of the same moto, with the same per-start keys, which the
container gets in its environment; ``gated_server`` refuses that listener with the well-known test
keys), and terminating the instance removes it.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign"

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from moto.ec2 import ec2_backends
from moto.ec2.models.instances import Instance

from airflow_provider_dltrain.engines.ec2_plan import parse_plan, replace_plan
from airflow_provider_dltrain.testing.local_executor import (
    CONTAINER_LABEL,
    ContainerSpec,
    LocalCloudExecutor,
    iter_backends,
)
from airflow_provider_dltrain.utils.ports import free_port

log = logging.getLogger("fake_aws.ec2")
SHUTDOWN_STUB = """#!/bin/sh
echo "$@" >> "${DLTRAIN_NODE_DIR:-/var/lib/dltrain}/shutdown.log"
"""
# In a container: the AMI's boot starts sshd (Horovod's ranks are started over SSH), then the user data.
BOOT = "mkdir -p /run/sshd && /usr/sbin/sshd && exec bash /var/lib/dltrain/user_data.sh"
CONTAINER_PATH = "/opt/fake-ec2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class NodeNetwork:
    """The fake's Docker network for instance containers, and moto listening on its gateway."""

    def __init__(self, instance: str) -> None:
        self.name = f"fake-aws-{instance}"
        self.instance = instance
        self.lock = threading.Lock()
        self.subnet: ipaddress.IPv4Network | None = None
        self.endpoint: str | None = None
        self.server: Any = None
        self._hosts: Any = None

    def ensure(self) -> None:
        with self.lock:
            if self.subnet is not None:
                return
            # a random 10.x.y.0/24: another fake, or a network of the machine, may hold one
            for _ in range(20):
                subnet = ipaddress.IPv4Network(f"10.{random.randint(16, 250)}.{random.randint(0, 255)}.0/24")
                gateway = str(next(subnet.hosts()))
                create = subprocess.run(
                    [
                        "docker",
                        "network",
                        "create",
                        "--driver",
                        "bridge",
                        "--subnet",
                        str(subnet),
                        "--gateway",
                        gateway,
                        "--label",
                        f"{CONTAINER_LABEL}={self.instance}",
                        self.name,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if create.returncode == 0:
                    break
                if "overlap" not in create.stderr:
                    raise RuntimeError(f"docker network create failed: {create.stderr.strip()}")
            else:
                raise RuntimeError("no free 10.x.y.0/24 subnet for the instances' network")
            from airflow_provider_dltrain.testing.fake_aws_auth import gated_server

            self.server = gated_server(gateway, 0)  # the instances' network is reachable by others too
            self.endpoint = f"http://{gateway}:{self.server.get_host_and_port()[1]}"
            hosts = subnet.hosts()
            next(hosts)  # the gateway
            self._hosts = hosts
            self.subnet = subnet
            log.info("instances' network %s %s, moto at %s", self.name, subnet, self.endpoint)

    def next_ip(self) -> str:
        self.ensure()
        with self.lock:
            return str(next(self._hosts))

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.subnet is not None:
            subprocess.run(["docker", "network", "rm", self.name], capture_output=True, timeout=60)


def instance_key(instance: Any) -> tuple[str, ...]:
    backend = instance.ec2_backend
    return ("ec2", backend.account_id, backend.region_name, instance.id)


def user_data_text(instance: Any) -> str | None:
    data = instance.user_data
    if not data:
        return None
    raw = data.as_bytes() if hasattr(data, "as_bytes") else data[0]
    raw = raw.encode() if isinstance(raw, str) else raw
    try:
        return base64.b64decode(raw).decode()
    except ValueError:
        return raw.decode(errors="replace")


class Ec2Nodes:
    """Starts the node processes and ends the instances whose script shut them down."""

    def __init__(self, ex: LocalCloudExecutor) -> None:
        self.ex = ex
        self.ports: dict[str, int] = {}
        self.network = NodeNetwork(ex.containers.instance) if ex.containers else None

    def scan(self, ex: LocalCloudExecutor) -> None:
        for _account, _region, backend in iter_backends(ec2_backends):
            for reservation in list(backend.reservations.values()):
                for instance in list(reservation.instances):
                    if instance.state in ("pending", "running") and ex.claim(instance_key(instance)):
                        self.start(instance)

    def start(self, instance: Any) -> None:
        text = user_data_text(instance)
        if not text or "cat > plan.json <<'DLTRAIN_PLAN'" not in text:
            return  # not one of ours: an instance nobody boots
        workdir = self.ex.new_workdir(f"ec2-{instance.id}")
        stubs = workdir / "bin"
        stubs.mkdir()
        (stubs / "shutdown").write_text(SHUTDOWN_STUB)
        (stubs / "shutdown").chmod(0o755)

        def on_exit(returncode: int, message: str) -> None:
            self.finish(instance, workdir, returncode)

        if self.network is not None and self.ex.containers is not None:
            (workdir / "user_data.sh").write_text(text)  # as launched: addresses are real
            self.network.ensure()
            container = ContainerSpec(
                self.ex.containers.image("ec2"),
                {str(workdir): "/var/lib/dltrain", str(stubs): "/opt/fake-ec2/bin"},
                "/var/lib/dltrain",
                entrypoint="bash",
                network=self.network.name,
                ip=instance.private_ip,
                hostname=f"ip-{instance.private_ip.replace('.', '-')}",
            )
            self.ex.start_process(
                instance_key(instance),
                "ec2",
                workdir,
                ["-c", BOOT],
                on_exit,
                env_extra={"PATH": CONTAINER_PATH},
                container=container,
                endpoint=self.network.endpoint,
            )
            return
        plan = parse_plan(text)
        port = self.ports.setdefault(plan["job_name"], free_port())
        script = replace_plan(text, {"master_addr": "127.0.0.1", "master_port": port})
        (workdir / "user_data.sh").write_text(script)
        env = {
            "DLTRAIN_NODE_DIR": str(workdir),
            "DLTRAIN_PYTHON": sys.executable,
            "DLTRAIN_SSH_DIR": str(workdir / "ssh"),
            "PATH": f"{stubs}:{os.environ.get('PATH', '')}",
        }
        self.ex.start_process(
            instance_key(instance), "ec2", workdir, ["bash", "user_data.sh"], on_exit, env_extra=env
        )

    def finish(self, instance: Any, workdir: Path, returncode: int) -> None:
        log = workdir / "shutdown.log"
        asked = log.read_text().split("\n") if log.exists() else []
        if "-h now" not in asked or instance.state not in ("pending", "running"):
            return  # the script never shut down: the instance idles until terminated
        if instance.instance_initiated_shutdown_behavior == "terminate":
            instance.terminate()
        else:
            instance.stop()


def install(ex: LocalCloudExecutor) -> None:
    nodes = Ec2Nodes(ex)
    original_terminate = Instance.terminate

    def terminate(self: Any) -> Any:
        ex.kill(instance_key(self))  # the machine goes away with everything running on it
        return original_terminate(self)

    Instance.terminate = terminate
    ex.scanners.append(nodes.scan)
    network = nodes.network
    if network is None:
        return
    ex.closers.append(network.close)
    original_prep_nics = Instance.prep_nics

    def prep_nics(self: Any, *args: Any, **kwargs: Any) -> None:
        """Every instance's primary address comes from the containers' network."""
        original_prep_nics(self, *args, **kwargs)
        ip = network.next_ip()
        primary = self.nics[0]
        primary.private_ip_address = ip
        for item in primary.private_ip_addresses:
            if item.get("Primary"):
                item["PrivateIpAddress"] = ip

    Instance.prep_nics = prep_nics
