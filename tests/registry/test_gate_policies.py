"""Gate policies: floors, MLflow's thresholds (checked against MLflow's own validation), ties with a later cut-off, secondary metrics.

The rules are pure (``evaluate_gate``); two tests run them through the registry (SQLite MLflow) to
show a policy decision is recorded, replayed, and re-checked by the champion history's trust rule.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry import GateSpec, champion_history, evaluate_gate, register_and_promote
from airflow_provider_dltrain.store.gate import metric_threshold_failure
from airflow_provider_dltrain.store.models import TAG_GATE_RULE

ACC = "val_accuracy"


def test_the_default_gate_keeps_its_rule_and_its_reasons():
    gate = GateSpec(ACC, "max")
    assert gate.rule == "val_accuracy max min_delta=0" and gate.policy() == {}
    tie = evaluate_gate(gate, 0.9, 0.9, 1, candidate_cutoff="2026-11-02", champion_cutoff="2026-11-01")
    assert (
        not tie.passed and tie.reason.endswith("(mode=max): not better") and tie.decided_by == "improvement"
    )


@pytest.mark.parametrize(
    ("policy", "champion", "passed", "rule"),
    [
        ({"min_value": 0.8}, None, False, "min_value"),  # a floor refuses even the first model
        ({"min_value": 0.7}, None, True, "no_champion"),
        ({"max_value": 0.7}, 0.6, False, "max_value"),
        ({"min_value": 0.7}, 0.6, True, "improvement"),
    ],
)
def test_an_absolute_floor_or_ceiling_bounds_the_candidates_value(policy, champion, passed, rule):
    decision = evaluate_gate(GateSpec(ACC, "max", **policy), 0.75, champion, 1 if champion else None)
    assert (decision.passed, decision.decided_by) == (passed, rule), decision.reason
    if not passed:
        assert rule in decision.reason


# (greater_is_better, min_absolute_change, min_relative_change, candidate, champion, MLflow passes it)
THRESHOLD_CASES = [
    (True, None, 0.1, 0.9, 0.8, True),
    (True, None, 0.1, 0.87, 0.8, False),
    (True, None, 0.1, 0.88, 0.8, False),  # (0.88 - 0.8) / 0.8 is 0.09999999999999995 in floats
    (True, None, 0.1, -0.4, -0.5, True),  # a negative R2: +0.1 is 20 % of |-0.5|
    (True, None, 0.1, -0.46, -0.5, False),
    (True, None, 0.1, -0.55, -0.5, False),
    (True, None, 0.5, 1e-8, 0.0, True),  # zero champion: MLflow's fallback, better by >= 1e-10
    (True, None, 0.5, 5e-11, 0.0, False),
    (True, None, 0.5, -0.05, 0.0, False),
    (False, None, 0.1, 0.89, 1.0, True),
    (False, None, 0.1, 0.9, 1.0, False),  # (1.0 - 0.9) / 1.0 is 0.09999999999999998
    (False, None, 0.1, -1.1, -1.0, True),  # the case MLflow < 3.17 decided the other way
    (False, None, 0.1, -1.09, -1.0, False),
    (False, None, 0.1, -0.95, -1.0, False),
    (False, None, 0.2, -0.05, 0.0, True),
    (False, None, 0.2, 0.05, 0.0, False),
    (True, 0.05, None, 0.86, 0.8, True),
    (True, 0.05, None, 0.85, 0.8, False),  # 0.8 + 0.05 is 0.8500000000000001
    (True, 0.05, None, -0.9, -1.0, True),
    (False, 0.05, None, -1.1, -1.0, True),
    (False, 0.05, None, -1.04, -1.0, False),
    (False, 0.2, 0.1, 1.7, 2.0, True),
    (False, 0.2, 0.1, 1.85, 2.0, False),  # meets 10 %, misses the absolute 0.2
    (True, 0.01, 0.3, 1.2, 1.0, False),  # meets the absolute, misses 30 %
]
NEGATIVE_BEFORE_317 = "MLflow < 3.17 divided by the signed baseline (reversed for a negative one)"


def _gate(greater: bool, absolute: float | None, relative: float | None) -> GateSpec:
    return GateSpec(
        "m", greater_is_better=greater, min_absolute_change=absolute, min_relative_change=relative
    )


def _mlflow_passes(greater: bool, absolute, relative, candidate: float, champion: float) -> bool:
    """MLflow's own answer: ``validate_evaluation_results`` with a ``MetricThreshold``."""
    validation = pytest.importorskip("mlflow.models.evaluation.validation")
    from mlflow.models.evaluation import EvaluationResult

    threshold = validation.MetricThreshold(
        min_absolute_change=absolute, min_relative_change=relative, greater_is_better=greater
    )
    try:
        validation.validate_evaluation_results(
            {"m": threshold},
            EvaluationResult(metrics={"m": candidate}, artifacts={}),
            EvaluationResult(metrics={"m": champion}, artifacts={}),
        )
    except validation.ModelValidationFailedException:
        return False
    return True


@pytest.mark.parametrize(
    ("greater", "absolute", "relative", "candidate", "champion", "passes"), THRESHOLD_CASES
)
def test_min_absolute_and_relative_change_decide_as_mlflows_own_validation(
    greater, absolute, relative, candidate, champion, passes
):
    import mlflow

    if champion < 0 and relative is not None and Version(mlflow.__version__) < Version("3.17"):
        pytest.skip(NEGATIVE_BEFORE_317)
    assert _mlflow_passes(greater, absolute, relative, candidate, champion) is passes
    failed = metric_threshold_failure(_gate(greater, absolute, relative), candidate, champion)
    assert (failed is None) is passes, failed


@pytest.mark.parametrize(
    ("greater", "absolute", "relative", "candidate", "champion", "passes"), THRESHOLD_CASES
)
def test_the_gate_promotes_exactly_the_better_candidates_mlflows_thresholds_pass(
    greater, absolute, relative, candidate, champion, passes
):
    decision = evaluate_gate(_gate(greater, absolute, relative), candidate, champion, 3)
    better = candidate > champion if greater else candidate < champion
    assert decision.passed is (passes and better), decision.reason
    expected = "thresholds" if decision.passed else ("improvement" if not better else None)
    assert expected is None or decision.decided_by == expected, decision.reason


def test_a_tie_is_refused_although_mlflows_zero_relative_change_accepts_it():
    gate = GateSpec("m", "max", min_relative_change=0.0)
    assert metric_threshold_failure(gate, 0.5, 0.5) is None  # MLflow: a change of 0 is not below 0
    decision = evaluate_gate(gate, 0.5, 0.5, 3)
    assert not decision.passed and decision.decided_by == "improvement"


def test_threshold_reasons_state_improvement_and_margin_in_the_metrics_unit():
    relative = evaluate_gate(GateSpec("val_loss", "min", min_relative_change=0.002), 0.988, 0.989692, 4)
    assert relative.decided_by == "min_relative_change"
    assert "improves by 0.001692 < 0.00197938 (min_relative_change 0.002 x |0.989692|)" in relative.reason
    assert "%" not in relative.reason
    edge = evaluate_gate(GateSpec("m", "max", min_relative_change=0.1), 0.88, 0.8, 4)
    assert "improves by 0.07999999999999996 < 0.08000000000000002" in edge.reason  # refused by a float
    passed = evaluate_gate(
        GateSpec("m", "max", min_absolute_change=0.05, min_relative_change=0.1), 0.9, 0.8, 4
    )
    assert passed.reason.endswith(
        "improves by 0.1, meeting 0.05 (min_absolute_change) and 0.08 (min_relative_change 0.1 x |0.8|)"
    )


def test_a_tie_promotes_only_a_later_data_cutoff_under_ties_later_cutoff():
    gate = GateSpec(ACC, "max", ties="later_cutoff")
    later = evaluate_gate(gate, 0.9, 0.9, 1, candidate_cutoff="2026-11-05", champion_cutoff="2026-11-01")
    same = evaluate_gate(gate, 0.9, 0.9, 1, candidate_cutoff="2026-11-01", champion_cutoff="2026-11-01")
    worse = evaluate_gate(gate, 0.89, 0.9, 1, candidate_cutoff="2026-11-05", champion_cutoff="2026-11-01")
    assert later.passed and later.decided_by == "ties" and "ties='later_cutoff'" in later.reason
    assert not same.passed and "is not later than" in same.reason
    assert not worse.passed and worse.decided_by == "improvement"


def test_tiebreak_secondaries_decide_a_tie_in_order_before_the_tie_policy():
    gate = GateSpec(
        ACC,
        "max",
        ties="later_cutoff",
        secondary=[
            {"metric": "val_f1", "mode": "max", "role": "tiebreak"},
            {"metric": "val_loss", "role": "tiebreak"},
        ],
    )
    cutoffs = {"candidate_cutoff": "2026-11-05", "champion_cutoff": "2026-11-01"}
    worse_loss = evaluate_gate(
        gate, 0.9, 0.9, 1, secondary={"val_f1": (0.8, 0.8), "val_loss": (0.3, 0.2)}, **cutoffs
    )
    assert not worse_loss.passed and worse_loss.decided_by == "tiebreak:val_loss"
    better_f1 = evaluate_gate(
        gate, 0.9, 0.9, 1, secondary={"val_f1": (0.85, 0.8), "val_loss": (0.3, 0.2)}, **cutoffs
    )
    assert better_f1.passed and better_f1.decided_by == "tiebreak:val_f1"
    all_tied = evaluate_gate(
        gate, 0.9, 0.9, 1, secondary={"val_f1": (0.8, 0.8), "val_loss": (0.2, 0.2)}, **cutoffs
    )
    assert all_tied.passed and all_tied.decided_by == "ties"


def test_a_regressing_no_regress_secondary_refuses_an_otherwise_better_candidate():
    gate = GateSpec(ACC, "max", secondary=[{"metric": "val_loss", "mode": "min", "max_regression": 0.05}])
    within = evaluate_gate(gate, 0.95, 0.9, 2, secondary={"val_loss": (0.24, 0.2)})
    beyond = evaluate_gate(gate, 0.95, 0.9, 2, secondary={"val_loss": (0.3, 0.2)})
    unknown = evaluate_gate(gate, 0.95, 0.9, 2, secondary={"val_loss": (0.3, None)})
    assert within.passed and within.decided_by == "improvement"
    assert not beyond.passed and beyond.decided_by == "no_regress:val_loss" and "regresses" in beyond.reason
    assert not unknown.passed and "not known for both" in unknown.reason


@pytest.mark.parametrize(
    ("policy", "names"),
    [
        ({"min_relative_change": 1.5}, "min_relative_change"),
        ({"ties": "always"}, "ties='always'"),
        ({"secondary": [{"metric": "x", "role": "veto"}]}, "role='veto'"),
        ({"patience": 3}, "gate_policy"),
        ({"greater_is_better": False, "min_value": 0}, None),
    ],
)
def test_a_malformed_policy_names_the_bad_field(policy, names):
    if names is None:
        assert GateSpec.with_policy("m", "min", 0, policy).mode == "min"
        with pytest.raises(InvalidSpecError, match="disagree"):
            GateSpec.with_policy("m", "max", 0, policy)
        return
    with pytest.raises(InvalidSpecError, match=names):
        GateSpec.with_policy("m", "max", 0, policy)


def _promote(tracking, result, gate, cutoff):
    return register_and_promote(
        tracking,
        model_name="wine",
        model_uri=result["model_uri"],
        run_id=result["run_id"],
        metrics=result["metrics"],
        gate=gate,
        data_cutoff=cutoff,
    )


def test_a_tie_on_more_data_is_promoted_recorded_replayed_and_trusted(tracking, train):
    gate = GateSpec(
        ACC, "max", ties="later_cutoff", secondary=[{"metric": "val_loss", "max_regression": 0.1}]
    )
    first = _promote(tracking, train("2026-11-01", {ACC: 1.0, "val_loss": 0.2}), gate, "2026-11-01")
    second_run = train("2026-11-02", {ACC: 1.0, "val_loss": 0.25})
    second = _promote(tracking, second_run, gate, "2026-11-02")
    assert first.promoted and second.promoted and "ties='later_cutoff'" in second.reason
    regressed = _promote(tracking, train("2026-11-03", {ACC: 1.0, "val_loss": 0.9}), gate, "2026-11-03")
    assert not regressed.promoted and "no_regress" in regressed.reason
    again = _promote(tracking, second_run, gate, "2026-11-02")  # a re-run replays the recorded decision
    assert again.promoted and again.reason == second.reason
    assert [mv.version for mv in champion_history(tracking, "wine")] == [1, 2]  # re-checked from tags
    rule = tracking.client().get_model_version("wine", "2").tags[TAG_GATE_RULE]
    assert rule.startswith("val_accuracy max min_delta=0 policy={")


def test_a_forged_policy_record_that_would_not_pass_is_not_trusted(tracking, train):
    gate = GateSpec(ACC, "max", ties="later_cutoff")
    _promote(tracking, train("2026-11-01", {ACC: 1.0}), gate, "2026-11-01")
    _promote(tracking, train("2026-11-02", {ACC: 1.0}), gate, "2026-11-02")
    client = tracking.client()
    client.set_model_version_tag(
        "wine", "2", "dltrain.gate.champion_cutoff", "2026-11-09"
    )  # later than its own
    assert [mv.version for mv in champion_history(tracking, "wine")] == [1]


def test_a_secondary_metric_the_run_did_not_log_is_refused_before_anything_is_registered(tracking, train):
    gate = GateSpec(ACC, "max", secondary=[{"metric": "val_f1", "role": "no_regress"}])
    with pytest.raises(InvalidSpecError, match="val_f1"):
        _promote(tracking, train("2026-11-01", {ACC: 0.9}), gate, "2026-11-01")
    assert tracking.client().search_model_versions("name='wine'") == []
