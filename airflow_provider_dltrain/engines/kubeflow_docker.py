"""Kubeflow's Docker backend (``runtime_backend="container"``): what a cluster gives a TrainJob, on one machine.

The SDK's container backend runs a TrainJob as a Docker network and one container per node. This module
adds what a cluster has and that backend lacks:

* **a secret, mounted**: ``secret_env_file`` (a file of ``NAME=value`` lines on this machine, such as
  the one ``dltrain fake-aws --env-file`` writes) is bind-mounted read-only into every node at
  :data:`SECRET_PATH`, as a Kubernetes Secret volume is; the node function reads it into its own
  process before anything else. The values never enter the containers' configuration (``docker
  inspect`` shows a path), the TrainJob's ``environment`` or the staged spec. The MLflow connection's
  credentials go the same way: with any, the node gets one file per TrainJob (:func:`job_secret_file`:
  the user's lines, then the credentials; mode 0600 in a 0700 folder), deleted with the TrainJob;
* **host directories** mounted at the same path (``container_mounts``: a lake or MLflow store on disk);
* **clean-up of a failed creation**: the SDK leaves the job's network behind when it fails before
  its first container (a missing image), which :func:`remove_remains` deletes;
* **the node's own error**: :func:`node_error_lines` finds the traceback of the process that failed
  in a node's log, which torchrun's summary pushes out of the log's last lines.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

log = logging.getLogger(__name__)

SECRET_PATH = "/run/secrets/dltrain/env"
JOB_LABEL = "trainer.kubeflow.org/trainjob-name"
# names whose values are secrets: refused in the TrainJob's plain environment
SECRET_NAMES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "WANDB_API_KEY",
)
_TRACEBACK = "Traceback (most recent call last):"
# what torchrun (torch.distributed.elastic) prints about a failed child: not the child's own error
_LAUNCHER = re.compile(r"torch\.distributed\.elastic|ChildFailedError")
_RANK_PREFIX = re.compile(r"^\[(?:default)?\d+\]:")


def check_environment(environment: dict[str, str]) -> None:
    """Refuse a secret in the TrainJob's plain environment: anyone who may read the job reads it."""
    secrets = sorted(name for name in environment if name.upper() in SECRET_NAMES)
    if secrets:
        raise InvalidSpecError(
            f"backend option environment holds {secrets}: the TrainJob's environment is readable by anyone "
            "who may read the job (docker inspect, kubectl get trainjob); hand secrets to the nodes through "
            "secret_env_file (runtime_backend='container') or a Kubernetes Secret (tracking_secret, the "
            "service account's role on a cluster)"
        )


def check_secret_file(path: str) -> str:
    """``path`` made absolute, refused when missing, not a regular file or readable by others."""
    file = Path(path).expanduser().resolve()
    try:
        mode = file.stat().st_mode
    except OSError as err:
        raise InvalidSpecError(f"backend option secret_env_file {path!r} cannot be read: {err}") from err
    if not stat.S_ISREG(mode):
        raise InvalidSpecError(f"backend option secret_env_file {path!r} is not a regular file")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidSpecError(
            f"backend option secret_env_file {path!r} is open to other users (mode {stat.S_IMODE(mode):04o}): "
            f"chmod 600 {file}"
        )
    return str(file)


def secrets_dir() -> Path:
    """Where :func:`job_secret_file` keeps a TrainJob's secret file while the TrainJob exists."""
    return Path.home() / ".kubeflow" / "trainer" / "dltrain-secrets"


def job_secret_file(name: str, user_file: str | None, credentials: Mapping[str, str]) -> str:
    """The file mounted as TrainJob ``name``'s secret: ``user_file``'s lines, then ``credentials``
    (``NAME=value``, quoted as the node function reads them), mode 0600 in a 0700 folder."""
    folder = secrets_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    lines = Path(user_file).read_text().splitlines() if user_file else []
    lines += [f"{key}={shlex.quote(value)}" for key, value in sorted(credentials.items())]
    path = folder / f"{name}.env"
    temporary = folder / f".{name}.env.{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(temporary, path)
    return str(path)


def drop_secret_file(name: str) -> bool:
    """Delete TrainJob ``name``'s secret file (:func:`job_secret_file`); whether there was one."""
    try:
        (secrets_dir() / f"{name}.env").unlink()
    except FileNotFoundError:
        return False
    return True


class NodeMounts:
    """The SDK's Docker adapter, with host directories and the secret file mounted into every node."""

    def __init__(self, inner: Any, mounts: Sequence[str], secret_file: str | None = None) -> None:
        self._inner = inner
        self._mounts = {path: {"bind": path, "mode": "rw"} for path in mounts}
        self.mount_secret(secret_file)

    def mount_secret(self, secret_file: str | None) -> None:
        """Mount ``secret_file`` (None: no secret) at :data:`SECRET_PATH` in the nodes created next."""
        self._mounts = {p: m for p, m in self._mounts.items() if m["bind"] != SECRET_PATH}
        if secret_file:
            self._mounts[secret_file] = {"bind": SECRET_PATH, "mode": "ro"}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_and_start_container(self, **kwargs: Any) -> str:
        kwargs["volumes"] = {**self._mounts, **dict(kwargs.get("volumes") or {})}
        return str(self._inner.create_and_start_container(**kwargs))


def remove_remains(adapter: Any, name: str) -> list[str]:
    """Delete what TrainJob ``name`` left on this machine (containers, network, work directory); what went."""
    gone: list[str] = []
    for container in adapter.list_containers(filters={"label": [f"{JOB_LABEL}={name}"]}):
        try:
            adapter.remove_container(container["id"], force=True)
            gone.append(f"container {container['name']}")
        except Exception as err:  # gone meanwhile, or the daemon refused: say so, go on
            log.warning("could not remove container %s of TrainJob %s: %s", container["name"], name, err)
    network = adapter.get_network(f"{name}-net")
    if network:
        adapter.delete_network(network["id"])
        gone.append(f"network {name}-net")
    workdir = Path.home() / ".kubeflow" / "trainer" / "containers" / name
    if workdir.is_dir():
        shutil.rmtree(workdir, ignore_errors=True)
        gone.append(f"directory {workdir}")
    if drop_secret_file(name):
        gone.append("its secret file")
    return gone


def node_error_lines(text: str) -> list[str]:
    """The failing process's own traceback in a node's log (the last one that is not torchrun's)."""
    lines = [_RANK_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    blocks: list[list[str]] = []
    for i, line in enumerate(lines):
        if line.strip() != _TRACEBACK:
            continue
        block = [line]
        for following in lines[i + 1 :]:
            block.append(following)
            if following and not following.startswith((" ", "\t")):
                break  # the exception line ends a traceback
        blocks.append(block)
    own = [b for b in blocks if not _LAUNCHER.search(b[-1])]
    return own[-1][-30:] if own else []


__all__ = [
    "SECRET_PATH",
    "NodeMounts",
    "check_environment",
    "check_secret_file",
    "drop_secret_file",
    "job_secret_file",
    "node_error_lines",
    "remove_remains",
]
