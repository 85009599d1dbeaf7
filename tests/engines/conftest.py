"""Fixtures for cloud-engine tests: a fake AWS (moto + local data plane) and a leak check.

``fake_aws`` runs ``python -m tests.support.fake_aws`` in a child process (see that module): Glue job
runs, EMR steps and EMR Serverless job runs submitted to it really execute their S3 script locally.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_helpers import leaks

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0


def _read_ready(proc: subprocess.Popen, log_path: Path) -> str:
    """The endpoint from the child's ``READY <url>`` line; raises with the child's log on failure."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if selector.select(timeout=0.2):
            line = proc.stdout.readline()
            if line.startswith("READY "):
                return line.split()[1]
            if not line and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    raise RuntimeError(f"fake AWS did not start (exit code {proc.poll()}):\n{tail}")


@pytest.fixture(scope="session")
def fake_aws(tmp_path_factory):
    """Endpoint URL of a fake AWS whose jobs run locally; stopped at the end of the session."""
    log_path = tmp_path_factory.mktemp("fake-aws") / "fake_aws.log"
    env = dict(os.environ)
    env.pop("AWS_ENDPOINT_URL", None)  # the server itself must not point at another endpoint
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_aws", "--port", "0", "--verbose"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    try:
        yield _read_ready(proc, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def aws_leak_check(fake_aws):
    """Yields the endpoint; after the test, fails if a cluster, job run or application is left alive."""
    yield fake_aws
    leaked = leaks(fake_aws)
    assert not leaked, "cloud resources left running:\n  " + "\n  ".join(leaked)
