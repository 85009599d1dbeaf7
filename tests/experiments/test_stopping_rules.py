"""Median and ASHA rules, reading the other trials' histories from a real MLflow SQLite store."""

from __future__ import annotations

import json
import uuid

import pytest
from mlflow.entities import Metric

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.experiments import AshaRule, MedianStoppingRule, StoppingSpec, TrialStopper
from airflow_provider_dltrain.experiments.search_runs import RESULT_TAG, ensure_parent_run, reusable_trial
from airflow_provider_dltrain.experiments.stopping import PARENT_TAG, TRIAL_TAG, metric_histories
from airflow_provider_dltrain.store.config import TrackingConfig


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> TrackingConfig:
    """One SQLite store for the module (creating one costs seconds); every test has its own parent."""
    return TrackingConfig(tracking_uri=f"sqlite:///{tmp_path_factory.mktemp('rules') / 'mlflow.db'}")


def _parent(tracking: TrackingConfig) -> str:
    run_id, created = ensure_parent_run(tracking, "rules", uuid.uuid4().hex, run_name="search", tags={})
    assert created
    return run_id


def _trial(
    tracking: TrackingConfig, parent: str, name: str, values: list[float], metric: str = "val_loss"
) -> str:
    client = tracking.client()
    exp = client.get_run(parent).info.experiment_id
    run = client.create_run(exp, tags={"mlflow.parentRunId": parent, "dltrain.trial": name}, run_name=name)
    client.log_batch(
        run.info.run_id, metrics=[Metric(metric, v, 1000 + step, step) for step, v in enumerate(values)]
    )
    return run.info.run_id


def test_parent_run_is_created_once_per_search_key(tracking):
    key = uuid.uuid4().hex
    first, created = ensure_parent_run(tracking, "rules", key, run_name="s", tags={"a": "1"})
    again, created_again = ensure_parent_run(tracking, "rules", key, run_name="s", tags={"a": "1"})
    other, _ = ensure_parent_run(tracking, "rules", key + "-other", run_name="s", tags={})
    assert created and not created_again and first == again and other != first


def test_histories_come_from_the_parents_child_runs_only_and_leave_out_the_trials_own_attempts(tracking):
    parent = _parent(tracking)
    a = _trial(tracking, parent, "trial-00", [1.0, 0.5])
    _trial(tracking, parent, "trial-01", [2.0])
    other_parent, _ = ensure_parent_run(tracking, "rules", uuid.uuid4().hex, run_name="other", tags={})
    _trial(tracking, other_parent, "trial-00", [9.0])
    histories = metric_histories(tracking, parent, "val_loss", exclude_trial="trial-01")
    assert histories == {a: {0: 1.0, 1: 0.5}}


def test_median_rule_stops_a_trial_worse_than_the_median_of_the_others_at_the_same_step(tracking):
    parent = _parent(tracking)
    for i, values in enumerate([[1.0, 0.6, 0.4], [1.2, 0.8, 0.5], [1.1, 0.7, 0.6]]):
        _trial(tracking, parent, f"trial-{i:02d}", values)
    spec = StoppingSpec.coerce({"rule": "median", "metric": "val_loss", "grace_steps": 1, "min_trials": 2})
    bad = TrialStopper(spec, tracking, parent, "trial-03")
    assert not bad.observe({"val_loss": 2.3}, 0).stop  # step 0 is within the grace period
    decision = bad.observe({"val_loss": 2.29}, 1)
    # running averages at step 1: 0.8, 1.0, 0.9 -> median 0.9; this trial's best is 2.29
    assert decision.stop and "median 0.9" in decision.reason
    good = TrialStopper(spec, tracking, parent, "trial-04")
    good.observe({"val_loss": 0.9}, 0)
    assert not good.observe({"val_loss": 0.5}, 1).stop
    assert good.observe({"other": 1.0}, 2) is None  # a step without the watched metric decides nothing


def test_median_rule_waits_for_enough_trials_at_that_step():
    rule = MedianStoppingRule("min", grace_steps=0, min_trials=2)
    decision = rule.decide({0: 5.0, 1: 5.0, 2: 5.0}, [{0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0}], step=2)
    assert not decision.stop and "1 other trial(s) reached step 2" in decision.reason
    assert rule.decide({0: 5.0}, [{0: 1.0}, {0: 1.2}], step=0).stop


def test_median_rule_in_max_mode_stops_the_lower_accuracy():
    rule = MedianStoppingRule("max", grace_steps=0, min_trials=1)
    assert rule.decide({0: 0.1}, [{0: 0.8}], 0).stop
    assert not rule.decide({0: 0.9}, [{0: 0.8}], 0).stop


def test_asha_rungs_are_min_steps_times_powers_of_eta():
    rule = AshaRule("min", min_steps=1, reduction_factor=3)
    assert [s for s in range(12) if rule.is_rung(s)] == [0, 2, 8]
    assert [s for s in range(12) if AshaRule("min", 2, 2).is_rung(s)] == [1, 3, 7]


def test_asha_keeps_only_the_top_third_at_a_rung_as_recorded_so_far(tracking):
    parent = _parent(tracking)
    for i, values in enumerate([[0.9, 0.7, 0.5], [1.0, 0.8, 0.6], [1.1, 0.9, 0.8]]):
        _trial(tracking, parent, f"trial-{i:02d}", values)
    spec = StoppingSpec.coerce({"rule": "asha", "metric": "val_loss", "min_steps": 1, "reduction_factor": 3})
    late = TrialStopper(spec, tracking, parent, "trial-03")
    first = late.observe({"val_loss": 0.95}, 0)  # rung 0: 0.9, 0.95, 1.0, 1.1 -> top 1 is 0.9
    assert first.stop and "top 1 of 4" in first.reason
    best = TrialStopper(spec, tracking, parent, "trial-04")
    assert not best.observe({"val_loss": 0.85}, 0).stop
    assert not best.observe({"val_loss": 0.1}, 1).stop  # step 1 is not a rung
    assert not best.observe({"val_loss": 0.4}, 2).stop


def test_asha_alone_at_a_rung_continues():
    assert not AshaRule("min", 1, 3).decide({0: 9.0}, [], 0).stop


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"rule": "hyperband", "metric": "m"}, "rule"),
        ({"rule": "median", "metric": "m", "mode": "up"}, "mode"),
        ({"rule": "median"}, "metric"),
        ({"rule": "asha", "metric": "m", "reduction_factor": 1}, "reduction_factor"),
        ({"rule": "median", "metric": "m", "patience": 3}, "patience"),
    ],
)
def test_bad_stopping_specs_name_the_field(spec, field):
    with pytest.raises(InvalidSpecError, match=field):
        StoppingSpec.coerce(spec)


def test_a_reexpanded_list_with_one_trial_removed_finds_every_other_trials_result(tracking):
    parent, _ = ensure_parent_run(tracking, "reuse", uuid.uuid4().hex, run_name="search", tags={})
    client = tracking.client()
    exp = client.get_run(parent).info.experiment_id
    for i, lr in enumerate([0.1, 0.01, 0.001]):
        identity = {"dltrain.params_hash": f"lr={lr}", "dltrain.code_hash": "c"}
        run = client.create_run(exp, tags={PARENT_TAG: parent, TRIAL_TAG: f"trial-0{i}", **identity})
        result = {"run_id": run.info.run_id, "trial": f"trial-0{i}", "metrics": {"val_loss": lr}}
        client.set_tag(run.info.run_id, RESULT_TAG, json.dumps(result))
        client.set_terminated(run.info.run_id, "FINISHED")
    # lr=0.1 removed: trial-00 is now lr=0.01 and trial-01 lr=0.001
    for name, lr in [("trial-00", 0.01), ("trial-01", 0.001)]:
        found = reusable_trial(
            tracking, parent, name, {"dltrain.params_hash": f"lr={lr}", "dltrain.code_hash": "c"}
        )
        assert found is not None and found["metrics"]["val_loss"] == lr and found["trial"] == name
    assert (
        reusable_trial(
            tracking, parent, "trial-00", {"dltrain.params_hash": "lr=7", "dltrain.code_hash": "c"}
        )
        is None
    )
