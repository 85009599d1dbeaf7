"""NaN is a failure: a non-finite training metric fails the run and keeps its model out of MLflow.

In-process backend on the digits table, a real SQLite MLflow store; the multi-rank paths are ``slow``.
"""

from __future__ import annotations

import math

import pytest

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.training import run_training
from airflow_provider_dltrain.training.finite import TAG
from airflow_provider_dltrain.training.tracking import FAILURE_TAG


def _only_run(tracking):
    client = tracking.client()
    experiment = client.get_experiment_by_name("dltrain")
    (run,) = client.search_runs([experiment.experiment_id])
    return run


def _logged_models(tracking) -> list:
    client = tracking.client()
    experiment = client.get_experiment_by_name("dltrain")
    return list(client.search_logged_models(experiment_ids=[experiment.experiment_id]))


def linear_train(ctx) -> dict[str, float]:
    """A linear model fitted by squared error; ``lr=1e3`` diverges to inf, then NaN, within an epoch.

    ``nan_at``: the loss logged at that epoch is replaced by NaN (training itself is unaffected).
    ``final``: what the function returns instead of the last loss (e.g. ``nan``), after saving.
    """
    import torch
    from torch.nn import functional as F

    hp = ctx.hparams
    model = ctx.wrap(torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=float(hp.get("lr", 1e-3)))
    loader = ctx.dataloader(256, columns=["features", "label"])
    loss = math.nan
    for epoch in range(int(hp.get("epochs", 3))):
        total, rows = 0.0, 0
        for batch in loader:
            x, y = batch["features"].float() / 16, batch["label"].long()
            batch_loss = F.mse_loss(model(x), F.one_hot(y, 10).float())
            opt.zero_grad()
            batch_loss.backward()
            opt.step()
            total, rows = total + batch_loss.item() * len(y), rows + len(y)
        loss = math.nan if epoch == hp.get("nan_at") else total / rows
        ctx.log_metrics({"loss": loss}, step=epoch)
    ctx.save_model(model)
    return {"loss": float(hp.get("final", loss))}


DIVERGES = {"lr": 1e3}


def test_a_nan_final_loss_fails_the_run_as_a_user_error_with_no_model_logged(digits_ref, tracking):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

    with pytest.raises(AirflowFailException) as caught, fail_fast_on_user_error():  # not retried
        run_training(linear_train, digits_ref, DIVERGES, tracking=tracking)
    assert isinstance(caught.value.__cause__, DltrainUserError)
    message = str(caught.value)
    assert "NonFiniteError" in message and "'loss' is nan" in message
    assert "non_finite='allow'" in message  # says how to keep such a model anyway
    run = _only_run(tracking)
    assert run.info.status == "FAILED"
    assert "NonFiniteError" in run.data.tags[FAILURE_TAG] and "'loss' is nan" in run.data.tags[FAILURE_TAG]
    assert math.isnan(run.data.metrics["loss"])  # the curve that led there is kept
    assert _logged_models(tracking) == []


def test_nan_at_one_epoch_fails_at_that_step_when_every_step_is_checked(digits_ref, tracking):
    with pytest.raises(DltrainUserError, match=r"'loss' is nan at step 1 \(rank 0"):
        run_training(
            linear_train, digits_ref, {"nan_at": 1}, tracking=tracking, non_finite="fail_at_any_step"
        )
    run = _only_run(tracking)
    assert run.info.status == "FAILED" and "at step 1" in run.data.tags[FAILURE_TAG]
    assert _logged_models(tracking) == []


def test_nan_at_one_epoch_that_recovers_passes_the_end_check_and_is_tagged(digits_ref, tracking):
    result = run_training(linear_train, digits_ref, {"nan_at": 1}, tracking=tracking)
    run = _only_run(tracking)
    assert run.info.status == "FINISHED" and result.model_uri
    assert math.isfinite(result.metrics["loss"])
    assert run.data.tags[TAG] == "loss=nan at step 1; the final values were finite"


def test_allowed_non_finite_metrics_log_the_model_and_tag_the_run(digits_ref, tracking):
    result = run_training(linear_train, digits_ref, DIVERGES, tracking=tracking, non_finite="allow")
    run = _only_run(tracking)
    assert run.info.status == "FINISHED" and FAILURE_TAG not in run.data.tags
    assert result.model_uri and len(_logged_models(tracking)) == 1
    assert math.isnan(result.metrics["loss"])
    assert run.data.tags[TAG].endswith("allowed by non_finite='allow'")


def test_a_model_saved_before_a_nan_final_metric_is_taken_back(digits_ref, tracking):
    with pytest.raises(DltrainUserError, match="returned by the training function"):
        run_training(linear_train, digits_ref, {"epochs": 1, "final": "nan"}, tracking=tracking)
    assert _only_run(tracking).info.status == "FAILED"
    assert _logged_models(tracking) == []


def test_without_tracking_no_state_dict_is_left_for_a_diverged_model(digits_ref, tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path))
    with pytest.raises(DltrainUserError, match="'loss' is nan"):
        run_training(linear_train, digits_ref, DIVERGES, tracking=False)
    assert list(tmp_path.rglob("model.pt")) == []


def test_an_unknown_mode_is_refused_before_any_run_starts(digits_ref, tracking, tmp_path):
    with pytest.raises(InvalidSpecError, match="non_finite must be one of"):
        run_training(linear_train, digits_ref, {}, tracking=tracking, non_finite="ignore")
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run was opened


def test_the_switch_does_not_enter_the_run_identity(digits_ref):
    allowed = run_training(linear_train, digits_ref, {"epochs": 1}, tracking=False, non_finite="allow")
    checked = run_training(linear_train, digits_ref, {"epochs": 1}, tracking=False)
    assert (allowed.params_hash, allowed.code_hash) == (checked.params_hash, checked.code_hash)
    assert allowed.weights_sha256 == checked.weights_sha256


def test_the_operator_refuses_an_unknown_mode_when_the_dag_is_parsed(digits_ref):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    with pytest.raises(InvalidSpecError, match="non_finite"):
        TrainModelOperator(task_id="t", dataset=digits_ref.to_dict(), train_fn=print, non_finite=True)


@pytest.mark.slow
def test_a_nan_on_rank_0_of_two_ddp_ranks_fails_the_run_with_no_model(spark, digits_ref, tracking):
    with pytest.raises(DltrainUserError, match=r"rank 0 of 2.*'nan_loss' is nan at step 0"):
        run_training(
            "training_fns:non_finite_train",
            digits_ref,
            {},
            tracking=tracking,
            backend="torch_distributor",
            backend_options={"num_processes": 2},
            non_finite="fail_at_any_step",
        )
    run = _only_run(tracking)
    assert run.info.status == "FAILED" and "'nan_loss' is nan" in run.data.tags[FAILURE_TAG]
    assert _logged_models(tracking) == []


@pytest.mark.parametrize("mode", ["fail_at_end", "allow"])
def test_a_remote_job_carries_the_switch_in_its_spec_and_reports_the_outcome(
    digits_ref, tmp_path, monkeypatch, mode
):
    import json

    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
    from airflow_provider_dltrain.jobs import train_entry
    from airflow_provider_dltrain.lake.scan_plan import resolve

    for name in ("RANK", "WORLD_SIZE", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(train_entry.FAILURE_FILE_ENV, str(tmp_path / "failure"))
    spec = TrainJobSpec(
        train_fn="training_fns:non_finite_train",
        dataset=digits_ref.to_dict(),
        data_filter=[],
        hparams={},
        seed=0,
        world_size=1,
        data_fingerprint=resolve(digits_ref).fingerprint,
        result_uri=str(tmp_path / "run" / "result.json"),
        non_finite=mode,
    )
    spec = TrainJobSpec.from_json(spec.to_json())  # what the job reads
    code = train_entry.run(spec)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    if mode == "allow":
        assert code == 0 and math.isnan(result["metrics"]["nan_loss"])
        assert result["non_finite"]["metric"] == "nan_loss" and result["model_uri"]
    else:
        assert code == 1 and result["user_error"] is True
        assert "NonFiniteError" in result["error"] and "'nan_loss' is nan" in result["error"]
        assert "nan_loss" in (tmp_path / "failure").read_text()


def test_the_launcher_refuses_a_reported_non_finite_metric_unless_allowed():
    from airflow_provider_dltrain.exceptions import NonFiniteError
    from airflow_provider_dltrain.training.finite import check_report

    report = {"metrics": {"accuracy": 0.9, "loss": float("inf")}}
    with pytest.raises(NonFiniteError, match="'loss' is inf"):
        check_report(report, "fail_at_end")
    check_report(report, "allow")
