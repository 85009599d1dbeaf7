"""The node plan and the user data of one EC2 training node; the per-run SSH key of a Horovod run.

The user data is a bash script holding two heredocs, the node plan (JSON) and the node runner
(:mod:`airflow_provider_dltrain.engines.ec2_node`, verbatim), so a node needs nothing from us but
a Python with boto3, torch and the job's libraries. Its first command is the dead-man switch:
``shutdown -h +<max_minutes>``, which with ``InstanceInitiatedShutdownBehavior=terminate`` ends the
instance even if the control plane is gone and nothing below it ever returns.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

TORCHRUN, HOROVODRUN = "torchrun", "horovodrun"
LAUNCHERS = (TORCHRUN, HOROVODRUN)  # what a training cluster's nodes run
# a stage run (ETL, scoring) on one instance: the entry under the plain Python, Spark local[*]
PYTHON = "python"
PLAN_LAUNCHERS = (*LAUNCHERS, PYTHON)
# how horovodrun starts the ranks on the other hosts: its own Gloo runner over SSH, or mpirun over SSH
CONTROLLERS = ("gloo", "mpi")
PLAN_EOF, NODE_EOF = "DLTRAIN_PLAN", "DLTRAIN_NODE"
# EC2 refuses user data above 16 KiB (before base64).
USER_DATA_LIMIT = 16 * 1024
SSH_KEY_PATH = "/root/.ssh/dltrain_id_ed25519"


@dataclass(frozen=True)
class NodePlan:
    """What one node does; JSON in its user data (no secrets: ``secret_env`` only names secrets)."""

    job_name: str
    node_rank: int
    num_nodes: int
    procs_per_node: int
    master_addr: str | None  # None on rank 0: it is the master
    master_port: int
    launcher: str
    entry: dict[str, Any]  # {"script_uri": s3://..., "args": [...]}
    run_uri: str
    status_uri: str
    hosts_uri: str
    ssh_key_uri: str
    ssh_key_path: str = SSH_KEY_PATH
    ssh_port: int = 22
    wait_s: float = 900.0
    python: str | None = None  # None: the interpreter running the node runner
    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    network_interface: str | None = None
    controller: str = "gloo"  # horovodrun only: one of CONTROLLERS

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)


def node_runner_source() -> str:
    from airflow_provider_dltrain.engines import ec2_node

    return Path(ec2_node.__file__ or "").read_text()


def render_user_data(
    plan: NodePlan,
    *,
    max_minutes: int,
    python: str = "python3",
    setup_commands: Sequence[str] = (),
    ssh_public_key: str | None = None,
) -> str:
    """The node's bash user data; refuses a script EC2 would refuse (over 16 KiB)."""
    if plan.launcher not in PLAN_LAUNCHERS:
        raise InvalidSpecError(f"launcher must be one of {PLAN_LAUNCHERS}, got {plan.launcher!r}")
    if plan.controller not in CONTROLLERS:
        raise InvalidSpecError(f"controller must be one of {CONTROLLERS}, got {plan.controller!r}")
    plan_json, runner = plan.to_json(), node_runner_source()
    for eof, body in ((PLAN_EOF, plan_json), (NODE_EOF, runner)):
        if eof in body.splitlines():
            raise InvalidSpecError(f"the node plan contains the heredoc terminator {eof!r}")
    lines = [
        "#!/bin/bash",
        f"# dltrain node {plan.node_rank} of {plan.num_nodes} for {plan.job_name} ({plan.launcher})",
        "set -u",
        "# Dead-man switch: this instance terminates after the run's time limit, whatever happens below.",
        f"shutdown -h +{int(max_minutes)}",
        'NODE_DIR="${DLTRAIN_NODE_DIR:-/var/lib/dltrain}"',
        'mkdir -p "$NODE_DIR" && cd "$NODE_DIR" || exit 1',
        f'PY="${{DLTRAIN_PYTHON:-{python}}}"',
        f"cat > plan.json <<'{PLAN_EOF}'",
        plan_json,
        PLAN_EOF,
        f"cat > ec2_node.py <<'{NODE_EOF}'",
        runner.rstrip("\n"),
        NODE_EOF,
        *_ssh_lines(ssh_public_key),
        *_run_lines(setup_commands),
        "# Done or failed (the markers on S3 say which): terminate now, not at the dead-man switch.",
        "shutdown -h now",
        "",
    ]
    text = "\n".join(lines)
    if len(text.encode()) > USER_DATA_LIMIT:
        raise InvalidSpecError(
            f"the user data of {plan.job_name} is {len(text.encode())} bytes, over EC2's 16 KiB: "
            "shorten setup_commands (put a long setup into the AMI or a script on S3)"
        )
    return text


def _ssh_lines(public_key: str | None) -> list[str]:
    if not public_key:
        return []
    return [
        "# horovodrun starts every rank from node 0 over SSH with this run's key.",
        'SSH_DIR="${DLTRAIN_SSH_DIR:-/root/.ssh}"',
        'mkdir -p "$SSH_DIR" && chmod 700 "$SSH_DIR"',
        f'echo {shlex.quote(public_key.strip())} >> "$SSH_DIR/authorized_keys"',
        'chmod 600 "$SSH_DIR/authorized_keys"',
    ]


def _run_lines(setup_commands: Sequence[str]) -> list[str]:
    if not setup_commands:
        return ['"$PY" ec2_node.py plan.json']
    body = "\n".join(f"  {command}" for command in setup_commands)
    return [
        "# Setup commands; a failure is reported on S3 at once instead of at the dead-man switch.",
        "if (",
        "  set -e",
        body,
        ") > setup.log 2>&1; then",
        '  "$PY" ec2_node.py plan.json',
        "else",
        '  "$PY" ec2_node.py plan.json --setup-failed setup.log',
        "fi",
    ]


def ssh_key_pair() -> tuple[bytes, str]:
    """A fresh Ed25519 key (OpenSSH private key, public key line) for one Horovod run."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, f"{public.decode()} dltrain"


def parse_plan(user_data: str) -> dict[str, Any]:
    """The node plan inside a user data script (what the fake AWS and the reaper read back)."""
    lines = user_data.splitlines()
    start = lines.index(f"cat > plan.json <<'{PLAN_EOF}'") + 1
    end = lines.index(PLAN_EOF, start)
    plan: dict[str, Any] = json.loads("\n".join(lines[start:end]))
    return plan


def replace_plan(user_data: str, changes: Mapping[str, Any]) -> str:
    """The same user data with some plan fields changed."""
    plan = {**parse_plan(user_data), **changes}
    lines = user_data.splitlines()
    start = lines.index(f"cat > plan.json <<'{PLAN_EOF}'") + 1
    end = lines.index(PLAN_EOF, start)
    return "\n".join([*lines[:start], json.dumps(plan, sort_keys=True, indent=1), *lines[end:]]) + "\n"
