"""``backend="ddp"``: DDP ranks forked from a warm fork server, seen by the training function as torchrun ranks.

A failing rank is tested beside TorchDistributor's in test_training_ddp.py."""

from __future__ import annotations

import glob
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_provider_dltrain.training import run_training
from airflow_provider_dltrain.training.forked import warm_up

pytestmark = pytest.mark.slow

DDP = {"backend": "ddp", "backend_options": {"num_processes": 2}}
HERE = Path(__file__).parent


def _ranks_of(process: psutil.Process) -> list[psutil.Process]:
    """Processes under ``process``'s fork servers: ranks still running."""
    servers = [c for c in process.children() if "multiprocessing.forkserver" in " ".join(c.cmdline())]
    return [rank for server in servers for rank in server.children(recursive=True)]


def _weights(result) -> list[str]:
    reports = sorted(glob.glob(f"{result.run_dir}/ranks/rank-*.json"))
    return [json.loads(Path(p).read_text())["weights_sha256"] for p in reports]


def test_ddp_trains_bit_identical_weights_to_torch_distributor(spark, digits_ref, tracking):
    hparams = {"epochs": 2, "batch_size": 16, "seed": 5}
    forked = run_training("training_fns:keyless_train", digits_ref, hparams, tracking=tracking, **DDP)
    torchrun = run_training(
        "training_fns:keyless_train",
        digits_ref,
        hparams,
        tracking=tracking,
        backend="torch_distributor",
        backend_options={"num_processes": 2},
    )
    assert forked.world_size == torchrun.world_size == 2
    assert len(set(_weights(forked))) == 1 and len(_weights(forked)) == 2  # DDP kept the replicas equal
    assert _weights(forked) == _weights(torchrun)  # same content, code, hparams, seed and world size
    assert forked.metrics == torchrun.metrics
    assert not _ranks_of(psutil.Process())


def test_ranks_see_the_callers_environment_directory_and_one_thread(
    digits_ref, tracking, tmp_path, monkeypatch, caplog
):
    warm_up()  # the fork server starts before the variable and the directory below are set
    monkeypatch.setenv("DLTRAIN_PROBE", "set after the fork server started")
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.training")
    result = run_training(
        "training_fns:probe_train", digits_ref, {"trace_dir": str(tmp_path)}, tracking=tracking, **DDP
    )
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(s["rank"], s["world_size"]) for s in seen] == [(0, 2), (1, 2)]
    assert {s["marker"] for s in seen} == {"set after the fork server started"}
    assert {s["cwd"] for s in seen} == {str(tmp_path)}
    assert {s["threads"] for s in seen} == {1}  # torchrun's rule: one thread per rank
    assert seen[0]["pid"] != seen[1]["pid"] != os.getpid()
    assert result.metrics["probed"] == 1.0
    assert "[rank 1] probe rank 1 done" in caplog.text  # the ranks' output reaches the task log
    assert not _ranks_of(psutil.Process())


LAUNCHER = """
import sys
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training import run_training
run_training("training_fns:probe_train", sys.argv[1], {"trace_dir": sys.argv[2], "sleep": 120},
             tracking=TrackingConfig(tracking_uri=sys.argv[3]), backend="ddp", backend_options={"num_processes": 2})
"""


def test_ranks_end_with_the_process_that_launched_them(digits_ref, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LAUNCHER,
            digits_ref.to_json(),
            str(tmp_path),
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"rank{r}.json").exists() for r in (0, 1)):
            assert launcher.poll() is None, "the launcher ended before its ranks started"
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        ranks = [psutil.Process(json.loads((tmp_path / f"rank{r}.json").read_text())["pid"]) for r in (0, 1)]
        left = [*ranks, *psutil.Process(launcher.pid).children(recursive=True)]
        launcher.send_signal(signal.SIGKILL)  # no handler, no cleanup: the worst way a task process ends
        launcher.wait()
        _, alive = psutil.wait_procs(left, timeout=20)
        assert not alive, f"left running: {[p.pid for p in alive]}"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


SCRIPT = """
import sys
if __name__ != "__main__":  # what a console script such as Airflow's `airflow` cannot survive
    raise SystemExit(f"the launcher's main script ran again in a rank, as {__name__}")
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training import run_training
result = run_training("training_fns:probe_train", sys.argv[1], {"trace_dir": sys.argv[2]},
                      tracking=TrackingConfig(tracking_uri=sys.argv[3]), backend="ddp",
                      backend_options={"num_processes": 2})
print("TRAINED", result.world_size)
"""


def test_a_program_started_as_a_script_is_not_run_again_in_its_ranks(digits_ref, tmp_path):
    # An Airflow worker runs tasks under the `airflow` console script: a path, not `python -m`
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            digits_ref.to_json(),
            str(tmp_path),
            f"sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "TRAINED 2" in done.stdout, done.stderr[-3000:]
    assert all((tmp_path / f"rank{r}.json").exists() for r in (0, 1))
