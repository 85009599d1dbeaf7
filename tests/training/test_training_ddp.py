"""The same training function as 2-process DDP under TorchDistributor (local mode, gloo on CPU), and a failing
rank under both local DDP launchers (``torch_distributor``, ``ddp``)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
from pathlib import Path

import psutil
import pytest
from training_fns import KEY

from airflow_provider_dltrain.exceptions import DltrainUserError
from airflow_provider_dltrain.lake.scan_plan import resolve
from airflow_provider_dltrain.training import TrainingUserError, run_training
from airflow_provider_dltrain.training.loader import LoaderSpec, num_rows

pytestmark = pytest.mark.slow

EPOCHS = 12
DDP = {"backend": "torch_distributor", "backend_options": {"num_processes": 2}}


def _read(path) -> list[str]:
    return json.loads(path.read_text())


def test_two_rank_ddp_sees_each_row_once_keeps_ranks_identical_and_matches_one_process(
    spark, digits_ref, tracking, tmp_path
):
    hparams = {"epochs": EPOCHS, "batch_size": 32, "seed": 11}
    ddp_trace, local_trace = tmp_path / "ddp", tmp_path / "local"
    ddp_trace.mkdir(), local_trace.mkdir()
    ddp = run_training(
        "training_fns:traced_demo_train",
        digits_ref,
        {**hparams, "trace_dir": str(ddp_trace)},
        tracking=tracking,
        **DDP,
    )
    single = run_training(  # one process with the global batch size (2 x 32) sees the same batches
        "training_fns:traced_demo_train",
        digits_ref,
        {**hparams, "batch_size": 64, "trace_dir": str(local_trace)},
        backend_options={"num_threads": 1},
        tracking=tracking,
    )

    # every epoch: ranks disjoint, together exactly the split, for training and validation
    spec = LoaderSpec(resolve(digits_ref), 1, (KEY,), split="train", key=KEY)
    sizes = {
        "train": num_rows(spec),
        "validation": num_rows(LoaderSpec(spec.plan, 1, (KEY,), "validation", KEY)),
    }
    for split, epoch in [("train", 0), ("train", EPOCHS - 1), ("validation", 0)]:
        rank0 = _read(ddp_trace / f"{split}-epoch{epoch}-rank0.json")
        rank1 = _read(ddp_trace / f"{split}-epoch{epoch}-rank1.json")
        assert not set(rank0) & set(rank1)
        assert len(rank0) + len(rank1) == len(set(rank0 + rank1)) == sizes[split]
        assert set(rank0 + rank1) == set(_read(local_trace / f"{split}-epoch{epoch}-rank0.json"))

    reports = [json.loads(Path(p).read_text()) for p in sorted(glob.glob(f"{ddp.run_dir}/ranks/rank-*.json"))]
    assert [r["rank"] for r in reports] == [0, 1]
    assert reports[0]["weights_sha256"] == reports[1]["weights_sha256"]  # DDP kept the replicas equal
    assert reports[1]["model_uri"] is None and ddp.model_uri and ddp.world_size == 2

    client = tracking.client()
    ddp_loss = [
        m.value for m in sorted(client.get_metric_history(ddp.run_id, "train_loss"), key=lambda m: m.step)
    ]
    one_loss = [
        m.value for m in sorted(client.get_metric_history(single.run_id, "train_loss"), key=lambda m: m.step)
    ]
    assert len(ddp_loss) == EPOCHS  # only rank 0 logged
    assert ddp_loss[0] == pytest.approx(one_loss[0], rel=1e-3)  # same global batches, averaged gradients
    assert ddp_loss[-1] == pytest.approx(one_loss[-1], abs=0.05)
    assert ddp.metrics["val_accuracy"] >= 0.9  # the demo model's acceptance bar, with 2 DDP processes
    assert client.get_run(ddp.run_id).data.tags["dltrain.world_size"] == "2"


def _rank_processes() -> list[psutil.Process]:
    """Ranks still running under this process: torchrun's, or those of a fork server (``ddp``)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = " ".join(child.cmdline())
            if (
                "torch.distributed.run" in command
                or "torchrun" in command
                or "multiprocessing.forkserver" in command
            ):
                found.append(child)
    servers = {
        p.pid
        for p in found
        if "multiprocessing.forkserver" in " ".join(p.cmdline()) and p.ppid() == os.getpid()
    }
    return [p for p in found if p.pid not in servers]  # a fork server waits for the next training


@pytest.mark.parametrize("backend", ["torch_distributor", "ddp"])
def test_a_failing_rank_surfaces_as_one_user_error_naming_that_rank_with_its_traceback(
    spark, digits_ref, tracking, backend
):
    with pytest.raises(TrainingUserError) as caught:
        run_training(
            "training_fns:failing_train",
            digits_ref,
            {"fail_rank": 1, "user_error": True},
            tracking=tracking,
            backend=backend,
            backend_options={"num_processes": 2},
        )
    message = str(caught.value)
    assert isinstance(caught.value, DltrainUserError)  # the operator fails the task without retries
    assert message.startswith("training failed on rank 1 of 2")
    assert "SchemaMismatchError: column 'features' has 63 values in row 7" in message
    assert "--- traceback of rank 1 ---" in message and "failing_train" in message
    experiment = tracking.client().get_experiment_by_name("dltrain")
    (run,) = tracking.client().search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"
    assert not _rank_processes()  # rank 0, waiting in a collective, was stopped too
