"""2-rank DDP through TorchDistributor(local_mode=False) on a Spark standalone cluster.

Each rank runs in a barrier task on another worker (its own executor JVM and working directory), so
its reports, error reports and checkpoints can only reach the driver through shared storage: an S3
bucket on the moto server here.
"""

from __future__ import annotations

import io
import json
import os

import pytest
import torch
from training_digits import digits_partition

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.lake.storage import filesystem
from airflow_provider_dltrain.training import TrainingUserError, run_training

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HPARAMS = {"epochs": 3, "batch_size": 16, "seed": 5}
TRAIN_FN = "training_fns:keyless_train"  # tests/training's model: dropout, DDP, allreduce, save_model


@pytest.fixture
def s3_digits(s3_bucket):
    """200 digits in one partition of ``s3://<bucket>/lake/digits``; yields ``(ref, bucket, options)``."""
    bucket, options = s3_bucket
    ref = lake.overwrite_partition(
        f"s3://{bucket}/lake/digits", digits_partition(0, 9), {"ds": "2026-11-25"}, storage_options=options
    )
    return ref, bucket, options


def _read(uri: str, options) -> bytes:
    fs, path = filesystem(uri, options)
    with fs.open_input_stream(path) as handle:
        return bytes(handle.read())


def _listing(uri: str, options) -> list[str]:
    import pyarrow.fs as pafs

    fs, path = filesystem(uri, options)
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted(i.path[len(path) :].lstrip("/") for i in found if i.type == pafs.FileType.File)


def _ddp(local_mode: bool, **options):
    return {
        "backend": "torch_distributor",
        "backend_options": {"num_processes": 2, "local_mode": local_mode, **options},
    }


def test_cluster_ranks_keep_reports_and_checkpoints_on_s3_and_train_the_same_weights_as_local_mode(
    cluster_spark, s3_digits
):
    ref, bucket, options = s3_digits
    on_cluster = run_training(
        TRAIN_FN,
        ref,
        HPARAMS,
        tracking=False,
        storage_options=options,
        **_ddp(False, run_uri=f"s3://{bucket}/runs"),
    )
    on_driver = run_training(TRAIN_FN, ref, HPARAMS, tracking=False, storage_options=options, **_ddp(True))

    run_dir = on_cluster.run_dir
    assert run_dir == f"s3://{bucket}/runs/{on_cluster.run_id}"
    assert not os.path.exists(os.path.join(os.environ["DLTRAIN_HOME"], "runs", on_cluster.run_id))
    assert _listing(run_dir, options) == ["checkpoints/model.pt", "ranks/rank-0.json", "ranks/rank-1.json"]
    reports = [json.loads(_read(f"{run_dir}/ranks/rank-{r}.json", options)) for r in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1] and {r["world_size"] for r in reports} == {2}
    assert on_cluster.model_uri == f"{run_dir}/checkpoints/model.pt"

    # same rows, code, seed and world size: the same bits, whichever machines the ranks ran on
    local_reports = [json.loads(_read(f"{on_driver.run_dir}/ranks/rank-{r}.json", {})) for r in (0, 1)]
    assert {r["torch_threads"] for r in reports + local_reports} == {1}
    assert {r["weights_sha256"] for r in reports + local_reports} == {on_driver.weights_sha256}
    assert on_cluster.weights_sha256 == on_driver.weights_sha256
    assert on_cluster.metrics == on_driver.metrics
    cluster_weights = torch.load(io.BytesIO(_read(on_cluster.model_uri, options)), weights_only=True)
    driver_weights = torch.load(on_driver.model_uri, weights_only=True)
    assert all(torch.equal(cluster_weights[k], driver_weights[k]) for k in driver_weights)


def test_a_failing_cluster_rank_names_its_error_through_the_shared_error_files(cluster_spark, s3_digits):
    ref, bucket, options = s3_digits
    with pytest.raises(TrainingUserError) as caught:
        run_training(
            "training_fns:failing_train",
            ref,
            {"fail_rank": 1, "user_error": True},
            tracking=False,
            storage_options=options,
            **_ddp(False),  # default run directory: beside the table
        )
    message = str(caught.value)
    assert message.startswith("training failed on rank 1 of 2")
    assert "SchemaMismatchError: column 'features' has 63 values in row 7" in message
    assert "--- traceback of rank 1 ---" in message and "failing_train" in message
    (run_id,) = {p.split("/")[0] for p in _listing(f"s3://{bucket}/lake/_dltrain_runs", options)}
    errors = _listing(f"s3://{bucket}/lake/_dltrain_runs/{run_id}/errors", options)
    assert "rank-1.json" in errors
