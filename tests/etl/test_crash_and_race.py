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


def _line(proc, word: str) -> float:
    """Waits for the writer's line that starts with `word` (WRITING: its Spark session is up and the
    write begins; COMMITTED: the write is done); returns when it came."""
    for line in proc.stdout:
        if line.startswith(word):
            return time.monotonic()
    raise AssertionError(f"the writer exited ({proc.wait()}) before it printed {word}")


@pytest.mark.slow
def test_kill_9_in_the_middle_of_a_write_never_exposes_a_partial_version(tmp_path):
    # How long one whole write takes here, measured on a table of its own (a re-run of the same
    # partition would find it unchanged and write nothing), so that every kill below lands inside
    # the write on a fast machine and a slow one alike, wherever the JVM's start-up ends.
    probe = _start(str(tmp_path / "probe"), "2026-11-28")
    began = _line(probe, "WRITING")
    write_s = _line(probe, "COMMITTED") - began
    assert probe.wait(60) == 0

    uri = str(tmp_path / "t")
    rng = random.Random(7)
    kills = 0
    for _ in range(5):
        proc = _start(uri, "2026-11-28")
        _line(proc, "WRITING")
        time.sleep(rng.uniform(0.1, 0.9) * write_s)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(30)
        _every_version_is_whole(uri)
    assert kills >= 3, (
        f"the writer finished before most kills (a write takes {write_s:.1f} s): nothing was tested"
    )
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
