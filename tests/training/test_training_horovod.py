"""The same training function on 2 Horovod ranks launched by ``horovodrun --gloo`` (CPU)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest
from training_fns import KEY

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.lake.scan_plan import resolve
from airflow_provider_dltrain.training import HorovodBackend, TrainingUserError, get_backend, run_training
from airflow_provider_dltrain.training.loader import LoaderSpec, num_rows

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.usefixtures("horovod")]

EPOCHS = 6
HOROVOD = {"backend": "horovod", "backend_options": {"num_processes": 2}}
DDP = {"backend": "torch_distributor", "backend_options": {"num_processes": 2}}


def _losses(tracking, run_id: str) -> list[float]:
    history = tracking.client().get_metric_history(run_id, "train_loss")
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def _reports(run_dir: str) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in sorted(glob.glob(f"{run_dir}/ranks/rank-*.json"))]


def test_horovod_ranks_see_each_row_once_end_with_equal_weights_and_match_ddp_loss(
    spark, digits_ref, tracking, tmp_path
):
    hparams = {"epochs": EPOCHS, "batch_size": 32, "seed": 11}
    trace = tmp_path / "trace"
    trace.mkdir()
    hvd = run_training(
        "training_fns:traced_demo_train",
        digits_ref,
        {**hparams, "trace_dir": str(trace)},
        tracking=tracking,
        **HOROVOD,
    )
    ddp = run_training(
        "airflow_provider_dltrain.demo.digits_model:train", digits_ref, hparams, tracking=tracking, **DDP
    )

    spec = LoaderSpec(resolve(digits_ref), 1, (KEY,), split="train", key=KEY)
    for epoch in (0, EPOCHS - 1):
        rank0 = json.loads((trace / f"train-epoch{epoch}-rank0.json").read_text())
        rank1 = json.loads((trace / f"train-epoch{epoch}-rank1.json").read_text())
        assert not set(rank0) & set(rank1) and len(rank0) + len(rank1) == num_rows(spec)

    reports = _reports(hvd.run_dir)
    assert [(r["rank"], r["world_size"]) for r in reports] == [(0, 2), (1, 2)]
    assert reports[0]["weights_sha256"] == reports[1]["weights_sha256"]  # Horovod kept replicas equal
    assert reports[0]["torch_threads"] == reports[1]["torch_threads"] == 1  # torchrun's rule, same bits
    assert reports[1]["model_uri"] is None and hvd.model_uri and hvd.world_size == 2
    assert not os.path.exists(os.path.join(hvd.run_dir, "job.pkl"))  # the pickled job (credentials) is gone

    hvd_loss, ddp_loss = _losses(tracking, hvd.run_id), _losses(tracking, ddp.run_id)
    assert len(hvd_loss) == EPOCHS  # only rank 0 logged
    assert hvd_loss[0] == pytest.approx(ddp_loss[0], rel=1e-3)  # same batches, same averaged gradients
    assert hvd_loss[-1] == pytest.approx(ddp_loss[-1], abs=0.02)
    assert hvd.metrics["val_accuracy"] == pytest.approx(ddp.metrics["val_accuracy"], abs=0.02)
    tags = tracking.client().get_run(hvd.run_id).data.tags
    assert tags["dltrain.backend"] == "horovod" and tags["dltrain.world_size"] == "2"
    assert tags["dltrain.collectives"] == "horovod/gloo"


def test_horovod_run_is_bit_identical_when_repeated(digits_ref):
    hparams = {"epochs": 1, "batch_size": 32, "seed": 3}
    first, second = (
        run_training(
            "airflow_provider_dltrain.demo.digits_model:train", digits_ref, hparams, tracking=False, **HOROVOD
        )
        for _ in range(2)
    )
    assert first.weights_sha256 and first.weights_sha256 == second.weights_sha256
    assert first.metrics == second.metrics


def test_a_failing_horovod_rank_surfaces_as_one_user_error_naming_that_rank(digits_ref, tracking):
    with pytest.raises(TrainingUserError) as caught:
        run_training(
            "training_fns:failing_train",
            digits_ref,
            {"fail_rank": 1, "user_error": True},
            tracking=tracking,
            **HOROVOD,
        )
    message = str(caught.value)
    assert isinstance(caught.value, DltrainUserError)
    assert message.startswith("training failed on rank 1 of 2")
    assert "SchemaMismatchError: column 'features' has 63 values in row 7" in message
    assert "--- traceback of rank 1 ---" in message and "failing_train" in message
    experiment = tracking.client().get_experiment_by_name("dltrain")
    (run,) = tracking.client().search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"


def test_horovod_backend_launches_horovodrun_gloo_with_the_rank_entry_and_rejects_object_storage(tmp_path):
    backend = get_backend("horovod", {"num_processes": 3})
    command = backend.command("/runs/r/job.pkl")
    assert os.path.basename(command[0]) == "horovodrun" and os.access(command[0], os.X_OK)
    assert command[1:6] == ["--gloo", "-np", "3", "-H", "localhost:3"]
    assert command[-3:] == ["-m", "airflow_provider_dltrain.training.horovod_main", "/runs/r/job.pkl"]
    with pytest.raises(InvalidSpecError, match="every host mounts"):
        HorovodBackend(run_uri="s3://bucket/runs")
    with pytest.raises(InvalidSpecError, match="num_processes"):
        HorovodBackend(num_processes=0)
    shared = HorovodBackend(run_uri=str(tmp_path))
    assert shared.shared_run_dir("abc", None) == os.path.join(str(tmp_path), "abc")  # type: ignore[arg-type]
