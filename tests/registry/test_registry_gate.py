"""The gate rule itself: pure, no MLflow."""

from __future__ import annotations

import math

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry import GateSpec, evaluate_gate


def test_min_mode_promotes_a_lower_value_and_refuses_a_higher_one():
    gate = GateSpec(metric="val_loss", mode="min")
    better = evaluate_gate(gate, 0.30, 0.40, champion_version=2)
    worse = evaluate_gate(gate, 0.50, 0.40, champion_version=2)
    assert better.passed and "improves by 0.1" in better.reason and "v2" in better.reason
    assert not worse.passed and "not better" in worse.reason


def test_max_mode_promotes_a_higher_value_and_refuses_a_lower_one():
    gate = GateSpec(metric="accuracy", mode="max")
    assert evaluate_gate(gate, 0.91, 0.90, champion_version=1).passed
    assert not evaluate_gate(gate, 0.89, 0.90, champion_version=1).passed


@pytest.mark.parametrize(
    ("mode", "candidate", "champion", "passed"),
    [
        ("min", 0.4, 0.5, True),  # improvement 0.1 == min_delta despite float noise (0.09999...)
        ("min", 0.45, 0.5, False),  # improvement 0.05 < 0.1
        ("max", 0.8, 0.7, True),
        ("max", 0.75, 0.7, False),
    ],
)
def test_min_delta_is_the_smallest_improvement_that_promotes(mode, candidate, champion, passed):
    decision = evaluate_gate(GateSpec(metric="m", mode=mode, min_delta=0.1), candidate, champion, 1)
    assert decision.passed is passed
    if not passed:
        assert "< min_delta 0.1" in decision.reason


def test_a_tie_never_promotes():
    assert not evaluate_gate(GateSpec(metric="m"), 0.5, 0.5, 1).passed
    assert not evaluate_gate(GateSpec(metric="m", mode="max"), 0.5, 0.5, 1).passed


def test_the_first_model_is_promoted_when_there_is_no_champion():
    decision = evaluate_gate(GateSpec(metric="val_loss"), 0.9, None, None)
    assert decision.passed and "no champion" in decision.reason


def test_a_champion_without_the_metric_refuses_and_says_what_to_do():
    decision = evaluate_gate(GateSpec(metric="val_loss"), 0.1, None, champion_version=4)
    assert not decision.passed
    assert "v4 has no 'val_loss'" in decision.reason and "move the alias by hand" in decision.reason


def test_a_nan_candidate_is_refused():
    assert not evaluate_gate(GateSpec(metric="m"), math.nan, 0.5, 1).passed


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"metric": "", "mode": "min"}, "metric"),
        ({"metric": "m", "mode": "median"}, "mode='median'"),
        ({"metric": "m", "min_delta": -0.1}, "min_delta=-0.1"),
        ({"metric": "m", "min_delta": "abc"}, "min_delta='abc'"),
    ],
)
def test_a_malformed_gate_names_the_bad_field(kwargs, names):
    with pytest.raises(InvalidSpecError, match=names):
        GateSpec(**kwargs)


def test_min_delta_given_as_template_text_is_parsed():
    assert GateSpec(metric="m", min_delta="0.05").min_delta == 0.05


def test_a_diverged_first_model_never_becomes_champion():
    decision = evaluate_gate(GateSpec(metric="val_accuracy", mode="max"), math.nan, None, None)
    assert not decision.passed and "not a finite number" in decision.reason
