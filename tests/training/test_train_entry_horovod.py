"""The cloud training entry point under Horovod's launchers (EC2 ``horovodrun``, SageMaker ``mpirun``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
from airflow_provider_dltrain.jobs.train_entry import launched_ranks
from airflow_provider_dltrain.lake.scan_plan import resolve

REPO = Path(__file__).resolve().parents[2]
LAUNCH_VARS = (
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RANK": "1", "WORLD_SIZE": "4"}, (1, 4, False)),
        ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}, (1, 2, True)),
        ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}, (3, 4, True)),
        ({}, (0, 1, False)),
    ],
)
def test_ranks_come_from_whichever_launcher_started_the_job(monkeypatch, env, expected):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launched_ranks() == expected


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_ranks_of_a_cloud_job_train_through_horovod_and_rank_0_reports(
    digits_ref, tmp_path, horovod
):
    run_dir = tmp_path / "run"
    spec = TrainJobSpec(
        train_fn="airflow_provider_dltrain.demo.digits_model:train",
        dataset=digits_ref.to_dict(),
        data_filter=[],
        hparams={"epochs": 1, "batch_size": 64, "seed": 3},
        seed=3,
        world_size=2,
        data_fingerprint=resolve(digits_ref).fingerprint,
        result_uri=str(run_dir / "result.json"),
    )
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for name in LAUNCH_VARS:
        env.pop(name, None)
    argv = [horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, "-m"]
    argv += ["airflow_provider_dltrain.jobs.entry", "--spec", str(spec_path)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = json.loads((run_dir / "result.json").read_text())
    assert result["rank"] == 0 and result["world_size"] == 2  # two Horovod ranks, not two jobs of one
    ranks = [json.loads(p.read_text()) for p in sorted((run_dir / "ranks").glob("rank-*.json"))]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]  # gradients were averaged
    assert all(r["rows_seen"].get("train", 0) > 0 for r in ranks)  # each rank trained on its shard
