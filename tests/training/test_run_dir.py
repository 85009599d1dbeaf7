"""Where a run keeps its files: the driver's directory, or a URI on shared storage for cluster ranks.

The S3 path is exercised in one process against the moto server: a rank's report, its checkpoints
and its error report go to the bucket, and the launcher's error message is read back from there.
"""

from __future__ import annotations

import io
import json
import os
from types import SimpleNamespace

import pytest
import torch
from training_digits import digits_partition

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.scan_plan import resolve
from airflow_provider_dltrain.lake.storage import filesystem
from airflow_provider_dltrain.training import TrainingUserError
from airflow_provider_dltrain.training.backends import LocalBackend, TorchDistributorBackend
from airflow_provider_dltrain.training.rank_job import RankJob, execute
from airflow_provider_dltrain.training.rundir import rank_checkpoints, read_json_files


def _plan(uri: str):
    return SimpleNamespace(ref=SimpleNamespace(uri=uri))


@pytest.mark.parametrize(
    ("table", "run_uri", "env", "expected"),
    [
        ("s3://b/lake/digits", None, None, "s3://b/lake/_dltrain_runs/r1"),  # beside the table
        ("s3://b/digits", None, None, "s3://b/_dltrain_runs/r1"),
        ("/data/lake/digits", None, None, "/data/lake/_dltrain_runs/r1"),  # a path every node mounts
        ("s3://b/lake/digits", None, "s3a://runs/dltrain/", "s3://runs/dltrain/r1"),
        ("s3://b/lake/digits", "file:///shared/runs", "s3://ignored", "/shared/runs/r1"),
    ],
)
def test_a_cluster_run_directory_is_the_configured_uri_or_beside_the_table(
    monkeypatch, table, run_uri, env, expected
):
    if env:
        monkeypatch.setenv("DLTRAIN_RUN_URI", env)
    else:
        monkeypatch.delenv("DLTRAIN_RUN_URI", raising=False)
    backend = TorchDistributorBackend(local_mode=False, run_uri=run_uri)
    assert backend.shared_run_dir("r1", _plan(table)) == expected


def test_local_mode_keeps_the_drivers_run_directory_unless_a_run_uri_is_given(monkeypatch):
    monkeypatch.setenv("DLTRAIN_RUN_URI", "s3://b/runs")
    assert TorchDistributorBackend(local_mode=True).shared_run_dir("r1", _plan("s3://b/t")) is None
    explicit = TorchDistributorBackend(local_mode=True, run_uri="s3://b/mine")
    assert explicit.shared_run_dir("r1", _plan("s3://b/t")) == "s3://b/mine/r1"
    with pytest.raises(InvalidSpecError, match="gs"):
        TorchDistributorBackend(run_uri="gs://bucket/runs")


@pytest.fixture
def s3_plan(s3_bucket):
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/lake/digits"
    ref = lake.overwrite_partition(uri, digits_partition(0, 9), {"ds": "2026-11-25"}, storage_options=options)
    return resolve(ref, storage_options=options), bucket, options


def _read(uri, options) -> bytes:
    fs, path = filesystem(uri, options)
    with fs.open_input_stream(path) as handle:
        return bytes(handle.read())


def test_a_rank_with_an_s3_run_directory_writes_its_report_and_checkpoints_there(s3_plan):
    from training_fns import keyless_train

    plan, bucket, options = s3_plan
    run_dir = f"s3://{bucket}/runs/r1"
    report = execute(RankJob(keyless_train, plan, {"epochs": 1}, 0, run_dir))

    assert json.loads(_read(f"{run_dir}/ranks/rank-0.json", options)) == json.loads(json.dumps(report))
    assert report["model_uri"] == f"{run_dir}/checkpoints/model.pt"
    weights = torch.load(io.BytesIO(_read(report["model_uri"], options)), weights_only=True)
    assert set(weights) == {"0.weight", "0.bias", "3.weight", "3.bias"}


def test_checkpoints_written_before_a_failure_still_reach_s3_and_the_scratch_copy_is_removed(s3_bucket):
    bucket, options = s3_bucket
    run_dir = f"s3://{bucket}/runs/r2"
    with pytest.raises(ValueError, match="boom"), rank_checkpoints(run_dir, 1, options) as scratch:
        with open(f"{scratch}/epoch-3.pt", "wb") as handle:
            handle.write(b"state")
        raise ValueError("boom")
    assert _read(f"{run_dir}/checkpoints/epoch-3.pt", options) == b"state"
    assert not os.path.exists(scratch)


def test_a_failing_rank_is_named_by_the_error_report_it_left_on_s3(s3_plan):
    from training_fns import failing_train

    plan, bucket, options = s3_plan
    run_dir = f"s3://{bucket}/runs/r3"
    job = RankJob(failing_train, plan, {"fail_rank": 0, "user_error": True}, 0, run_dir)
    with pytest.raises(TrainingUserError, match="training failed on rank 0 of 1: SchemaMismatchError"):
        LocalBackend(num_threads=1).run(job)
    (error,) = read_json_files(run_dir, "errors", "rank-*.json", options)
    assert error["rank"] == 0 and error["user_error"] is True
    assert options["AWS_SECRET_ACCESS_KEY"] not in json.dumps(error)
