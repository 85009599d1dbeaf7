"""A training run that fails after MLflow created it is always ended FAILED, saying why (real SQLite store)."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.exceptions import DltrainError, InvalidSpecError
from airflow_provider_dltrain.training import run_training
from airflow_provider_dltrain.training.tracking import FAILURE_TAG


def _only_run(tracking):
    client = tracking.client()
    experiment = client.get_experiment_by_name("dltrain")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    (run,) = runs
    return run


def _bad_metric_name(ctx):
    return {"accuracy@top1": 0.5}  # "@" is not allowed in an MLflow metric key


@pytest.mark.parametrize(
    ("hparams", "refused"),
    [
        ({"lr?": 0.1}, "lr?"),  # a key MLflow refuses
        ({"k" * 300: 1}, "maximum length"),  # a key longer than MLflow allows
    ],
)
def test_hparams_mlflow_refuses_end_the_run_failed_as_a_user_error(digits_ref, tracking, hparams, refused):
    with pytest.raises(InvalidSpecError, match="MLflow refused the hyper-parameters") as caught:
        run_training("training_fns:failing_train", digits_ref, hparams, tracking=tracking)
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert run.info.run_id in str(caught.value)
    assert run.data.tags[FAILURE_TAG].startswith("InvalidSpecError: MLflow refused")
    assert refused in run.data.tags[FAILURE_TAG]


def test_a_failing_train_function_ends_the_run_failed_with_the_reason_in_a_tag(digits_ref, tracking):
    with pytest.raises(DltrainError):
        run_training("training_fns:failing_train", digits_ref, {"fail_rank": 0}, tracking=tracking)
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert run.data.tags[FAILURE_TAG].startswith("TrainingFailedError: training failed on rank 0 of 1")
    assert "ValueError: boom on rank 0" in run.data.tags[FAILURE_TAG]


def test_final_metrics_mlflow_refuses_end_the_run_failed(digits_ref, tracking):
    with pytest.raises(InvalidSpecError, match="accuracy@top1"):
        run_training(_bad_metric_name, digits_ref, {}, tracking=tracking)
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert "accuracy@top1" in run.data.tags[FAILURE_TAG]


def test_a_failure_reason_never_carries_the_tracking_credentials(digits_ref, tracking):
    from dataclasses import replace

    secret = "pw-ShouldNeverAppear-81c2"
    with_secret = replace(tracking, env={"MLFLOW_TRACKING_PASSWORD": secret})

    def leaky(ctx):
        raise ValueError(f"connect failed with password {secret}")

    with pytest.raises(DltrainError):
        run_training(leaky, digits_ref, {}, tracking=with_secret)
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert secret not in run.data.tags[FAILURE_TAG] and "password ***" in run.data.tags[FAILURE_TAG]


@pytest.mark.slow
def test_a_failing_ddp_rank_ends_the_run_failed_with_that_rank_named(spark, digits_ref, tracking):
    with pytest.raises(DltrainError):
        run_training(
            "training_fns:failing_train",
            digits_ref,
            {"fail_rank": 1},
            tracking=tracking,
            backend="torch_distributor",
            backend_options={"num_processes": 2},
        )
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert "training failed on rank 1 of 2" in run.data.tags[FAILURE_TAG]
