"""A search trial stopped by the median rule ends cleanly: FINISHED, tagged, its model saved."""

from __future__ import annotations

import uuid

import pytest
from mlflow.entities import Metric

from airflow_provider_dltrain.experiments.search_runs import ensure_parent_run
from airflow_provider_dltrain.experiments.stopping import PARENT_TAG, TRIAL_TAG
from airflow_provider_dltrain.training import run_training

DEMO = "airflow_provider_dltrain.demo.digits_model:train"
RULE = {"rule": "median", "metric": "val_loss", "grace_steps": 1, "min_trials": 2}
FAST = {"epochs": 4, "batch_size": 64, "lr": 1e-6, "seed": 3}


def _search(tracking) -> str:
    parent, _ = ensure_parent_run(tracking, "stopping", uuid.uuid4().hex, run_name="search", tags={})
    client = tracking.client()
    exp = client.get_run(parent).info.experiment_id
    for name in ("trial-00", "trial-01"):  # two earlier trials that learned well
        run = client.create_run(exp, tags={PARENT_TAG: parent, TRIAL_TAG: name})
        client.log_batch(run.info.run_id, metrics=[Metric("val_loss", 1.0 / (s + 1), 0, s) for s in range(4)])
        client.set_terminated(run.info.run_id, "FINISHED")
    return parent


def _train(fn, tracking, parent, ref):
    return run_training(
        fn,
        ref,
        FAST,
        data_filter=[["ds", "<=", "2026-11-25"]],
        tracking=tracking,
        experiment_name="stopping",
        tags={PARENT_TAG: parent, TRIAL_TAG: "trial-02"},
        early_stopping={"spec": RULE, "parent_run_id": parent, "trial": "trial-02"},
    )


def test_a_trial_worse_than_the_median_stops_at_the_first_step_after_grace_with_its_model(
    tracking, digits_ref
):
    parent = _search(tracking)
    result = _train(DEMO, tracking, parent, digits_ref)
    assert result.stopped is not None and result.stopped["step"] == 1
    assert "worse than the median" in result.stopped["reason"]
    run = tracking.client().get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["dltrain.stopped_early"] == "true" and run.data.tags["dltrain.stopped_step"] == "1"
    steps = [m.step for m in tracking.client().get_metric_history(result.run_id, "val_loss")]
    assert steps == [0, 1]  # nothing trained after the stop
    assert result.model_uri and result.metrics["val_loss"] > 1.0


def test_a_function_that_asks_should_stop_handles_the_stop_itself(tracking, digits_ref):
    parent = _search(tracking)
    result = _train("training_fns:cooperative_train", tracking, parent, digits_ref)
    assert result.stopped["step"] == 1 and result.metrics["stopped_by_itself"] == 1.0


def test_early_stopping_without_a_tracking_store_is_refused(digits_ref):
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    with pytest.raises(InvalidSpecError, match="MLflow store"):
        run_training(
            DEMO,
            digits_ref,
            FAST,
            tracking=False,
            early_stopping={"spec": RULE, "parent_run_id": "p", "trial": "t"},
        )
