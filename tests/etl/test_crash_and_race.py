from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_dltrain import lake

JOB = str(Path(__file__).with_name("writer_job.py"))
N = 2000


def _start(uri, ds):
    return subprocess.Popen(
        [sys.executable, JOB, uri, ds, str(N)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _every_version_is_whole(uri):
    newest = lake.DeltaLog(uri).latest_version()
    if newest is None:
        return
    for version in range(newest + 1):
        table = lake.open_table(uri, version).to_pyarrow_table()
        ids = sorted(table.column("id").to_pylist())
        assert ids == list(range(N)), f"version {version} shows {len(ids)} rows, not {N}"


@pytest.mark.slow
def test_kill_9_in_the_middle_of_a_write_never_exposes_a_partial_version(tmp_path):
    uri = str(tmp_path / "t")
    rng = random.Random(7)
    kills = 0
    for _ in range(5):
        proc = _start(uri, "2026-11-28")
        time.sleep(rng.uniform(4.0, 11.0))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(30)
        _every_version_is_whole(uri)
    assert kills >= 3, "the writer finished before most kills: the test did not test anything"
    proc = _start(uri, "2026-11-28")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "COMMITTED" in out
    _every_version_is_whole(uri)


def test_two_runs_of_one_date_started_together_leave_one_copy_of_each_row(tmp_path):
    uri = str(tmp_path / "t")
    procs = [_start(uri, "2026-11-28") for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert any("COMMITTED" in o for o in outs)
    ids = sorted(lake.open_table(uri).to_pyarrow_table().column("id").to_pylist())
    assert ids == list(range(N))
