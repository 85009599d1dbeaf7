"""The fake AWS's per-start keys: the file only its user reads that they travel in, and, in the process
that started a fake, its keys by endpoint (stdlib only)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

ACCESS_KEY_ENV = "DLTRAIN_FAKE_AWS_ACCESS_KEY_ID"  # keys of the caller's own, instead of fresh ones
SECRET_KEY_ENV = "DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY"
# the instance profile EC2 nodes run as: every start of the fake creates it (with its role)
INSTANCE_PROFILE = "dltrain-node"
Keys = tuple[str, str]  # (access key id, secret access key)
# the credentials of every fake this process started, by endpoint (read from its 0600 file)
_STARTED: dict[str, Keys] = {}


def remember(endpoint: str, keys: Keys) -> None:
    """Keep the keys of the fake this process started at ``endpoint`` (until :func:`forget`)."""
    _STARTED[endpoint] = keys


def forget(endpoint: str) -> None:
    _STARTED.pop(endpoint, None)


def credentials_for(endpoint: str) -> Keys:
    """The credentials of the fake at ``endpoint``, which this process started; ValueError otherwise."""
    try:
        return _STARTED[endpoint]
    except KeyError:
        raise ValueError(
            f"no fake AWS at {endpoint} was started by this process, so its credentials are unknown: "
            "pass credentials=, read from the --env-file the fake wrote"
        ) from None


def read_env_file(path: str | Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of a file such as ``dltrain fake-aws --env-file`` writes."""
    env = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = " ".join(shlex.split(value))
    return env


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600 from the first byte; never through a
    link)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the file may have existed with a wider mode
        os.write(fd, text.encode())
    finally:
        os.close(fd)
