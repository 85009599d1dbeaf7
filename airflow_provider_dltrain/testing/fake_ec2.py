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
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign"

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

from moto.ec2 import ec2_backends
from moto.ec2.models.instances import Instance

from airflow_provider_dltrain.engines.ec2_plan import parse_plan, replace_plan
from airflow_provider_dltrain.testing.local_executor import LocalCloudExecutor, iter_backends
from airflow_provider_dltrain.utils.ports import free_port

SHUTDOWN_STUB = """#!/bin/sh
echo "$@" >> "$DLTRAIN_NODE_DIR/shutdown.log"
"""


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
        plan = parse_plan(text)
        port = self.ports.setdefault(plan["job_name"], free_port())
        script = replace_plan(text, {"master_addr": "127.0.0.1", "master_port": port})
        workdir = self.ex.new_workdir(f"ec2-{instance.id}")
        (workdir / "user_data.sh").write_text(script)
        stubs = workdir / "bin"
        stubs.mkdir()
        (stubs / "shutdown").write_text(SHUTDOWN_STUB)
        (stubs / "shutdown").chmod(0o755)
        env = {
            "DLTRAIN_NODE_DIR": str(workdir),
            "DLTRAIN_PYTHON": sys.executable,
            "DLTRAIN_SSH_DIR": str(workdir / "ssh"),
            "PATH": f"{stubs}:{os.environ.get('PATH', '')}",
        }

        def on_exit(returncode: int, message: str) -> None:
            self.finish(instance, workdir, returncode)

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
