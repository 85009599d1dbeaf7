"""SparkSubmitEngine's process bookkeeping, without Spark: a recorded pid names one process only.

The cluster tests (tests/cluster/test_spark_submit_engine.py) run real spark-submit jobs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from airflow_provider_dltrain.engines import JobHandle, RunIdentity
from airflow_provider_dltrain.engines.base import FAILED, RUNNING
from airflow_provider_dltrain.engines.spark_submit import SparkSubmitEngine, SparkSubmitOptions, _start_time

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _record(engine: SparkSubmitEngine, identity: RunIdentity, ids: dict) -> JobHandle:
    handle = JobHandle("spark_submit", {"host": socket.gethostname(), "log": "-", **ids}, "r")
    engine.stager.put(engine._active_uri(identity), json.dumps(handle.to_dict()).encode())
    return handle


def test_a_recorded_job_is_found_polled_and_cancelled_only_while_its_pid_is_that_process(tmp_path, sleeper):
    engine = SparkSubmitEngine(
        None, SparkSubmitOptions(master="spark://127.0.0.1:7077", staging_uri=str(tmp_path / "staging"))
    )
    identity = RunIdentity(dag_id="d", run_id="r", task_id="t")
    started = _start_time(sleeper.pid)
    assert started is not None

    # the pid now belongs to another process (it was reused since the job was recorded)
    reused = _record(engine, identity, {"pid": sleeper.pid, "started": repr(float(started) - 1.0)})
    assert engine.find(identity) is None
    assert engine.poll(reused).state == FAILED
    engine.cancel(reused)  # must not signal the unrelated process group
    assert sleeper.poll() is None

    # a handle recorded by an earlier version holds clock ticks: the pid alone decides
    legacy = _record(engine, identity, {"pid": sleeper.pid, "started": "123456"})
    assert engine.poll(legacy).state == RUNNING

    ours = _record(engine, identity, {"pid": sleeper.pid, "started": started})
    assert engine.find(identity) == ours
    assert engine.poll(ours).state == RUNNING
    engine.cancel(ours)
    # killed, not yet reaped (a zombie): no job to attach to any more
    deadline = time.monotonic() + 10
    while engine.find(identity) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.find(identity) is None and engine.poll(ours).state == FAILED
    assert sleeper.wait(timeout=10) != 0
