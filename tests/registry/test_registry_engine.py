"""Registration, promotion gate and champion history against a real MLflow store (SQLite)."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry import (
    GateSpec,
    ModelNotFoundError,
    champion_as_of,
    champion_history,
    gate_and_promote,
    register_and_promote,
    register_model,
)
from airflow_provider_dltrain.store.models import history_tags

MODEL = "digits"
LOSS = GateSpec(metric="val_loss", mode="min")

PROVENANCE = [
    "dltrain.dag_id",
    "dltrain.run_id",
    "dltrain.logical_date",
    "dltrain.data_cutoff",
    "dltrain.delta_ref",
    "dltrain.delta_uri",
    "dltrain.delta_version",
    "dltrain.provider_version",
    "dltrain.code_hash",
    "dltrain.params_hash",
    "dltrain.data_fingerprint",
]


def promote(tracking, result, cutoff=None, gate=LOSS, **kwargs):
    return register_and_promote(
        tracking,
        model_name=MODEL,
        model_uri=result["model_uri"],
        run_id=result["run_id"],
        metrics=result["metrics"],
        gate=gate,
        data_cutoff=cutoff,
        **kwargs,
    )


def live(tracking):
    return tracking.client().get_model_version_by_alias(MODEL, "champion").version


def all_versions(tracking):
    return sorted(int(mv.version) for mv in tracking.client().search_model_versions(f"name = '{MODEL}'"))


def test_registered_version_carries_the_runs_provenance_tags_and_metrics(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5, "accuracy": 0.8})
    mv = register_model(
        tracking,
        model_name=MODEL,
        model_uri=result["model_uri"],
        run_id=result["run_id"],
        metrics=result["metrics"],
        registration_key="nightly/scheduled__2026-11-01",
    )
    stored = tracking.client().get_model_version(MODEL, str(mv.version))
    assert mv.version == 1 and stored.run_id == result["run_id"]
    for key in PROVENANCE:
        assert stored.tags[key], key
    assert stored.tags["dltrain.data_cutoff"] == "2026-11-01"
    assert stored.tags["dltrain.metric.val_loss"] == "0.5"
    assert stored.tags["dltrain.registration_key"] == "nightly/scheduled__2026-11-01"
    assert stored.tags["dltrain.model_uri"] == result["model_uri"]
    assert "unrelated.tag" not in stored.tags
    assert mv.model_uri == f"models:/{MODEL}/1"


def test_registering_the_same_run_twice_creates_no_second_version(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5})
    first = promote(tracking, result)
    again = promote(tracking, result)
    assert (first.version, first.promoted, first.reason) == (again.version, again.promoted, again.reason)
    assert all_versions(tracking) == [1]


def test_a_racing_duplicate_registration_is_folded_into_the_lower_version(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5})
    kept = register_model(tracking, model_name=MODEL, model_uri=result["model_uri"], run_id=result["run_id"])
    # A racer that searched before `kept` existed creates its own copy (MLflow numbers it MAX+1) ...
    client = tracking.client()
    racer = client.create_model_version(MODEL, kept.source, run_id=result["run_id"], tags=kept.tags)
    assert int(racer.version) == 2
    # ... and on its post-create check converges on the lower version and deletes its copy.
    from airflow_provider_dltrain.registry.register import _keep_lowest

    winner = _keep_lowest(client, MODEL, result["model_uri"], result["run_id"], int(racer.version))
    assert winner.version == 1 and all_versions(tracking) == [1]


def test_the_gate_refuses_a_worse_model_and_promotes_a_better_one(tracking, train):
    first = promote(tracking, train("2026-11-01", {"val_loss": 0.50}))
    worse = promote(tracking, train("2026-11-02", {"val_loss": 0.60}))
    better = promote(tracking, train("2026-11-03", {"val_loss": 0.40}))
    assert first.promoted and first.holds_alias and "no champion" in first.reason
    assert not worse.promoted and not worse.holds_alias and worse.compared_with == 1
    assert worse.champion_version == 1  # the champion for 11-02 stays v1
    assert better.promoted and better.holds_alias and better.compared_with == 1
    assert live(tracking) == 3
    tags = tracking.client().get_model_version(MODEL, "2").tags
    assert tags["dltrain.gate.decision"] == "rejected"
    assert "not better" in tags["dltrain.gate.reason"]
    assert tags["dltrain.gate.compared_with"] == "1"


def test_max_mode_with_min_delta_refuses_a_too_small_improvement(tracking, train):
    gate = GateSpec(metric="accuracy", mode="max", min_delta=0.02)
    promote(tracking, train("2026-11-01", {"accuracy": 0.80}), gate=gate)
    small = promote(tracking, train("2026-11-02", {"accuracy": 0.81}), gate=gate)
    enough = promote(tracking, train("2026-11-03", {"accuracy": 0.83}), gate=gate)
    assert not small.promoted and "< min_delta 0.02" in small.reason
    assert enough.promoted and live(tracking) == 3


def test_an_older_cutoff_never_moves_the_live_alias(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))
    promote(tracking, train("2026-11-10", {"val_loss": 0.40}))
    backfill = promote(tracking, train("2026-11-05", {"val_loss": 0.10}))  # far better, but older data
    assert backfill.promoted and backfill.compared_with == 1  # gated against the champion as of 11-05
    assert not backfill.holds_alias and live(tracking) == 2
    assert "alias 'champion' stays on v2" in backfill.reason
    assert backfill.champion_version == 3


def test_champion_as_of_answers_before_between_and_after_promotions_with_a_backfill(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))  # v1 promoted
    promote(tracking, train("2026-11-10", {"val_loss": 0.40}))  # v2 promoted, live
    promote(tracking, train("2026-11-12", {"val_loss": 0.45}))  # v3 rejected
    promote(tracking, train("2026-11-05", {"val_loss": 0.45}))  # v4 backfill: beats v1 -> champion 11-05..09
    promote(tracking, train("2026-11-07", {"val_loss": 0.47}))  # v5 backfill: loses to v4 -> rejected

    def as_of(day):
        mv = champion_as_of(tracking, MODEL, day)
        return mv.version if mv else None

    assert as_of("2026-10-31") is None
    assert [as_of(d) for d in ("2026-11-01", "2026-11-04")] == [1, 1]
    assert [as_of(d) for d in ("2026-11-05", "2026-11-07", "2026-11-09")] == [4, 4, 4]
    assert [as_of(d) for d in ("2026-11-10", "2026-11-12", "2026-12-31")] == [2, 2, 2]
    assert live(tracking) == 2
    assert [mv.version for mv in champion_history(tracking, MODEL)] == [1, 4, 2]
    champ = champion_as_of(tracking, MODEL, "2026-11-06")
    assert champ.run_id and champ.source and champ.tags["dltrain.champion_from"] == "2026-11-05"
    assert champ.model_uri == f"models:/{MODEL}/4"


def test_re_promoting_the_same_cutoff_replaces_its_champion_and_keeps_later_ones(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))  # v1
    promote(tracking, train("2026-11-10", {"val_loss": 0.40}))  # v2 live
    redo = promote(tracking, train("2026-11-01", {"val_loss": 0.30}))  # v3: rerun of 11-01, better than v1
    assert redo.promoted and redo.compared_with == 1 and not redo.holds_alias
    assert champion_as_of(tracking, MODEL, "2026-11-01").version == 3
    assert champion_as_of(tracking, MODEL, "2026-11-10").version == 2 and live(tracking) == 2


def test_an_equal_cutoff_promotion_moves_the_live_alias(tracking, train):
    promote(tracking, train("2026-11-10", {"val_loss": 0.50}))
    same_day = promote(tracking, train("2026-11-10", {"val_loss": 0.40}))
    assert same_day.promoted and same_day.holds_alias and live(tracking) == 2


def test_re_gating_a_promoted_version_replays_its_decision_instead_of_comparing_with_itself(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))
    result = promote(tracking, train("2026-11-02", {"val_loss": 0.40}))
    replay = gate_and_promote(
        tracking, model_name=MODEL, version=result.version, gate=LOSS, data_cutoff="2026-11-02"
    )
    assert replay.promoted and replay.holds_alias and replay.reason == result.reason


def test_a_replay_finishes_an_alias_move_that_a_crash_interrupted(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))
    result = promote(tracking, train("2026-11-02", {"val_loss": 0.40}))
    tracking.client().set_registered_model_alias(MODEL, "champion", "1")  # as if the move never happened
    replay = gate_and_promote(
        tracking, model_name=MODEL, version=result.version, gate=LOSS, data_cutoff="2026-11-02"
    )
    assert replay.holds_alias and live(tracking) == 2


def test_a_custom_alias_keeps_its_own_history(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.50}))
    staged = promote(tracking, train("2026-11-02", {"val_loss": 0.60}), alias="staging")
    assert staged.promoted and staged.holds_alias  # first model for 'staging'
    assert champion_as_of(tracking, MODEL, "2026-11-02").version == 1
    assert champion_as_of(tracking, MODEL, "2026-11-02", alias="staging").version == 2
    assert history_tags("staging")[0] in tracking.client().get_model_version(MODEL, "2").tags


def test_gating_on_a_metric_the_training_did_not_report_fails_before_registering(tracking, train):
    result = train("2026-11-01", {"accuracy": 0.9})
    with pytest.raises(InvalidSpecError, match="'val_loss' is not in the training result's metrics"):
        promote(tracking, result)
    assert tracking.client().search_model_versions(f"name = '{MODEL}'") == []


def test_a_missing_cutoff_is_reported_with_what_to_set(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5}, **{"dltrain.data_cutoff": ""})
    with pytest.raises(InvalidSpecError, match="data_cutoff is not set"):
        promote(tracking, result)
    with pytest.raises(InvalidSpecError, match="not a date"):
        promote(tracking, result, cutoff="yesterday")


def test_the_cutoff_defaults_to_the_runs_data_cutoff_tag(tracking, train):
    outcome = promote(tracking, train("2026-11-03", {"val_loss": 0.5}))
    assert outcome.data_cutoff == "2026-11-03"


def test_gating_an_unknown_version_raises_model_not_found(tracking, train):
    promote(tracking, train("2026-11-01", {"val_loss": 0.5}))
    with pytest.raises(ModelNotFoundError, match="no version 9"):
        gate_and_promote(tracking, model_name=MODEL, version=9, gate=LOSS, data_cutoff="2026-11-01")
