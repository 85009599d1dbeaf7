"""Champion history counts only gated promotions; dates, model names and aliases are validated strictly."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from airflow.exceptions import AirflowFailException

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.registry import (
    GateSpec,
    ModelNotFoundError,
    champion_as_of,
    champion_history,
    register_and_promote,
    register_model,
    resolve_model,
)
from airflow_provider_dltrain.store.client import check_alias, check_name
from airflow_provider_dltrain.store.models import history_tags, normalize_date

MODEL = "digits"
LOSS = GateSpec(metric="val_loss", mode="min")
TEMPLATE = "{{ 7*7 }}"


def promote(tracking, result, cutoff, **kwargs):
    return register_and_promote(
        tracking,
        model_name=kwargs.pop("model_name", MODEL),
        model_uri=result["model_uri"],
        run_id=result["run_id"],
        metrics=result["metrics"],
        gate=LOSS,
        data_cutoff=cutoff,
        **kwargs,
    )


def forge_champion_tags(tracking, version: int, cutoff: str) -> None:
    """What someone with tag-write access could do by hand: the two history tags, no gate."""
    from_tag, at_tag = history_tags("champion")
    client = tracking.client()
    client.set_model_version_tag(MODEL, str(version), from_tag, cutoff)
    client.set_model_version_tag(MODEL, str(version), at_tag, "9999999999999")


def test_version_with_champion_tags_but_never_gated_is_never_the_champion(tracking, train, caplog):
    gated = promote(tracking, train("2026-11-01", {"val_loss": 0.5}), "2026-11-01")
    bare = register_model(
        tracking, model_name=MODEL, model_uri=train("2026-11-02", {"val_loss": 0.1})["model_uri"]
    )
    forge_champion_tags(tracking, bare.version, "2026-11-02")

    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.store.champion_history"):
        history = champion_history(tracking, MODEL)
    assert [mv.version for mv in history] == [gated.version]
    assert champion_as_of(tracking, MODEL, "2026-11-05").version == gated.version
    assert resolve_model(tracking, {"name": MODEL, "champion_as_of": "2026-11-05"}).version == gated.version
    assert f"v{bare.version}" in caplog.text and "not 'promoted'" in caplog.text


def test_forged_champion_before_the_first_gated_promotion_finds_no_champion(tracking, train):
    bare = register_model(
        tracking, model_name=MODEL, model_uri=train("2026-11-01", {"val_loss": 0.1})["model_uri"]
    )
    forge_champion_tags(tracking, bare.version, "2026-11-01")
    assert champion_history(tracking, MODEL) == []
    assert champion_as_of(tracking, MODEL, "2026-11-30") is None
    with pytest.raises(ModelNotFoundError, match="no 'champion' for data cut-off 2026-11-30"):
        resolve_model(tracking, {"name": MODEL, "champion_as_of": "2026-11-30"})


@pytest.mark.parametrize(
    ("tag", "value", "problem"),
    [
        ("dltrain.gate.decision", "rejected", "not 'promoted'"),
        ("dltrain.gate.alias", "staging", "not 'champion'"),
        ("dltrain.gate.data_cutoff", "2026-10-01", "differs from dltrain.champion_from"),
        ("dltrain.champion_from", "2026-10-01", "differs from dltrain.champion_from"),
        ("dltrain.gate.rule", "anything goes", "is not a gate rule"),
        ("dltrain.gate.basis", "rescored", "does not match"),
        ("dltrain.gate.champion_value", "0.1", "do not pass the recorded rule"),
        ("dltrain.gate.candidate_value", "0.9", "differs from the recorded val_loss"),
        ("dltrain.gate.candidate_value", "lots", "not numbers"),
        ("dltrain.gate.compared_with", "", "is set but"),
    ],
)
def test_promotion_whose_gate_record_does_not_match_is_ignored(tracking, train, caplog, tag, value, problem):
    promote(tracking, train("2026-11-01", {"val_loss": 0.5}), "2026-11-01")
    second = promote(tracking, train("2026-11-02", {"val_loss": 0.4}), "2026-11-02")
    assert second.promoted and second.compared_with == 1
    tracking.client().set_model_version_tag(MODEL, str(second.version), tag, value)

    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.store.champion_history"):
        assert [mv.version for mv in champion_history(tracking, MODEL)] == [1]
    assert champion_as_of(tracking, MODEL, "2026-11-30").version == 1
    assert problem in caplog.text


def test_gated_history_with_rounded_min_delta_still_counts(tracking, train):
    gate = GateSpec(metric="val_loss", mode="min", min_delta=0.1234567)
    register_and_promote(
        tracking,
        model_name=MODEL,
        model_uri=(r := train("2026-11-01", {"val_loss": 0.5}))["model_uri"],
        run_id=r["run_id"],
        metrics=r["metrics"],
        gate=gate,
        data_cutoff="2026-11-01",
    )
    second = train("2026-11-02", {"val_loss": 0.5 - 0.1234567})
    outcome = register_and_promote(
        tracking,
        model_name=MODEL,
        model_uri=second["model_uri"],
        run_id=second["run_id"],
        metrics=second["metrics"],
        gate=gate,
        data_cutoff="2026-11-02",
    )
    assert outcome.promoted, outcome.reason
    assert [mv.version for mv in champion_history(tracking, MODEL)] == [1, 2]


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("2026-11-28", "2026-11-28"),
        ("2026-11-28T00:00:00", "2026-11-28"),
        ("2026-11-28T23:59:59.123456", "2026-11-28"),
        ("2026-11-28T00:00:00+00:00", "2026-11-28"),
        ("2026-11-28T00:00:00Z", "2026-11-28"),
        ("2026-11-28 00:00:00+00:00", "2026-11-28"),  # str() of Airflow's pendulum datetimes
    ],
)
def test_dates_and_full_iso_timestamps_are_accepted(text, day):
    assert normalize_date(text, "data_cutoff") == day


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-28 junk",
        "2026-11-28Tjunk",
        "2026-11-28T00:00",
        "2026-11-28T25:00:00",
        "2026-02-30",
        "2026-11-28\n",
        " 2026-11-28",
        "20261128",
        "{{ ds }}",
        "",
    ],
)
def test_anything_else_is_refused_naming_the_field(text):
    with pytest.raises(InvalidSpecError, match=r"^data_cutoff=") as err:
        normalize_date(text, "data_cutoff")
    assert isinstance(err.value, DltrainUserError)


@pytest.mark.parametrize("name", ["digits", "digits_v2", "team.digits-model", "Ünïcode_9"])
def test_model_names_mlflow_accepts_are_accepted(name):
    assert check_name(name, "model_name") == name


@pytest.mark.parametrize(
    "name", [TEMPLATE, "a/b", "a:b", "it's", "two words", ".hidden", "-x", "", None, "x" * 256]
)
def test_model_names_outside_the_allowed_characters_are_refused_naming_the_field(name):
    with pytest.raises(InvalidSpecError, match="model_name") as err:
        check_name(name, "model_name")
    assert isinstance(err.value, DltrainUserError)


@pytest.mark.parametrize("alias", [TEMPLATE, "champ.ion", "latest", "V3", "", "a b"])
def test_aliases_outside_mlflows_rule_are_refused_naming_the_field(alias):
    with pytest.raises(InvalidSpecError, match=r"^alias"):
        check_alias(alias, "alias")
    assert check_alias("champion-2", "alias") == "champion-2"


def test_unrendered_template_as_model_name_or_alias_is_refused_everywhere(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5})
    with pytest.raises(InvalidSpecError, match=r"model_name='\{\{ 7\*7 \}\}'.*unrendered template"):
        promote(tracking, result, "2026-11-01", model_name=TEMPLATE)
    with pytest.raises(InvalidSpecError, match=r"^alias='\{\{ 7\*7 \}\}'"):
        promote(tracking, result, "2026-11-01", alias=TEMPLATE)
    with pytest.raises(InvalidSpecError, match="model spec 'name'"):
        resolve_model(tracking, {"name": TEMPLATE, "alias": "champion"})
    with pytest.raises(InvalidSpecError, match="model spec 'alias'"):
        resolve_model(tracking, {"name": MODEL, "alias": TEMPLATE})
    with pytest.raises(InvalidSpecError, match="unrendered template"):
        resolve_model(tracking, "models:/{{ 7*7 }}/1")
    with pytest.raises(InvalidSpecError, match="model_name"):
        champion_history(tracking, TEMPLATE)
    assert tracking.client().search_registered_models() == []


def test_operator_fails_without_retry_on_a_bad_name_or_date(monkeypatch, mlflow_uri, train):
    import json

    from airflow_provider_dltrain.operators.registry import RegisterModelOperator

    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_DEFAULT", json.dumps({"conn_type": "mlflow", "host": mlflow_uri}))
    result = train("2026-11-01", {"val_loss": 0.5})
    ti = SimpleNamespace(dag_id="nightly", run_id="manual__1", task_id="register", try_number=1)
    ctx = {"ti": ti, "run_id": "manual__1", "ds": "2026-11-01", "logical_date": None}
    cases = [
        ({"model_name": "{% raw %}{{ 7*7 }}{% endraw %}"}, "model_name='{{ 7*7 }}'"),
        ({"data_cutoff": "{{ ds }} junk"}, "data_cutoff='2026-11-01 junk' is not a date"),
    ]
    for kwargs, message in cases:
        params = {"model_name": MODEL, "metric": "val_loss", "data_cutoff": "{{ ds }}", **kwargs}
        op = RegisterModelOperator(task_id="register", train_result=result, **params)
        op.render_template_fields(ctx)  # type: ignore[arg-type]
        with pytest.raises(AirflowFailException, match="InvalidSpecError") as err:
            op.execute(ctx)  # type: ignore[arg-type]
        assert message in str(err.value)
