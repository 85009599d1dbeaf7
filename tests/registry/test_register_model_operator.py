"""RegisterModelOperator: sync path, error path, idempotent re-run, backfill, templating."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.exceptions import AirflowFailException

from airflow_provider_dltrain.operators.registry import RegisterModelOperator


@pytest.fixture(autouse=True)
def mlflow_connection(monkeypatch, mlflow_uri):
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_DEFAULT", json.dumps({"conn_type": "mlflow", "host": mlflow_uri}))


def context(ds: str) -> dict:
    run_id = f"scheduled__{ds}T00:00:00+00:00"
    ti = SimpleNamespace(dag_id="nightly_retrain", run_id=run_id, task_id="register", try_number=1)
    return {"ti": ti, "run_id": run_id, "ds": ds, "logical_date": None}


def operator(train_result, **kwargs) -> RegisterModelOperator:
    params = {"model_name": "digits", "metric": "val_loss", "mode": "min", "data_cutoff": "{{ ds }}"}
    params.update(kwargs)
    return RegisterModelOperator(task_id="register", train_result=train_result, **params)


def run(op: RegisterModelOperator, ds: str) -> dict:
    ctx = context(ds)
    op.render_template_fields(ctx)
    return op.execute(ctx)


def test_registers_promotes_and_returns_a_json_model_ref(tracking, train, capsys):
    ref = run(operator(train("2026-11-01", {"val_loss": 0.5})), "2026-11-01")
    assert json.loads(json.dumps(ref)) == ref
    assert ref["name"] == "digits" and ref["version"] == 1 and ref["alias"] == "champion"
    assert ref["promoted"] is True and ref["champion_version"] == 1 and ref["data_cutoff"] == "2026-11-01"
    assert "no champion" in ref["reason"]
    assert "digits v1 PROMOTED for data cut-off 2026-11-01" in capsys.readouterr().out  # the task log
    tags = tracking.client().get_model_version("digits", "1").tags
    assert tags["dltrain.registration_key"] == "nightly_retrain/scheduled__2026-11-01T00:00:00+00:00"


def test_a_worse_model_is_rejected_and_the_reason_is_logged(tracking, train, capsys):
    run(operator(train("2026-11-01", {"val_loss": 0.5})), "2026-11-01")
    ref = run(operator(train("2026-11-02", {"val_loss": 0.7}), min_delta="{{ 0.01 }}"), "2026-11-02")
    assert ref["promoted"] is False and ref["alias"] is None and ref["champion_version"] == 1
    assert "REJECTED" in capsys.readouterr().out and "not better" in ref["reason"]


def test_rerunning_the_task_creates_no_second_version_and_repeats_the_decision(tracking, train):
    result = train("2026-11-01", {"val_loss": 0.5})
    first = run(operator(result), "2026-11-01")
    again = run(operator(result), "2026-11-01")
    assert first == again
    assert len(tracking.client().search_model_versions("name = 'digits'")) == 1


def test_a_backfill_becomes_champion_for_its_date_without_taking_the_live_alias(tracking, train):
    run(operator(train("2026-11-01", {"val_loss": 0.5})), "2026-11-01")
    run(operator(train("2026-11-10", {"val_loss": 0.4})), "2026-11-10")
    ref = run(operator(train("2026-11-05", {"val_loss": 0.3})), "2026-11-05")
    assert ref["promoted"] is True and ref["alias"] is None and ref["champion_version"] == 3
    assert tracking.client().get_model_version_by_alias("digits", "champion").version == 2


def test_a_metric_missing_from_the_train_result_fails_without_retry_and_names_it(tracking, train):
    result = train("2026-11-01", {"accuracy": 0.9})
    with pytest.raises(AirflowFailException, match="metric 'val_loss' is not in train_result"):
        run(operator(result), "2026-11-01")
    assert tracking.client().search_model_versions("name = 'digits'") == []


def test_a_skipped_training_task_skips_registration_and_registers_nothing(tracking):
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="training task skipped"):
        run(operator(None), "2026-11-01")  # what the XComArg of a skipped task resolves to
    assert tracking.client().search_registered_models() == []


@pytest.mark.parametrize(
    ("train_result", "kwargs", "message"),
    [
        ({"metrics": {"val_loss": 0.1}}, {}, "no 'model_uri'"),
        ("not json", {}, "not JSON"),
        ({"model_uri": "models:/m-1", "metrics": {"val_loss": 0.1}}, {"mode": "median"}, "mode='median'"),
    ],
)
def test_malformed_input_fails_without_retry(train_result, kwargs, message):
    with pytest.raises(AirflowFailException, match=message):
        run(operator(train_result, **kwargs), "2026-11-01")


def test_constructor_is_keyword_only_and_fields_are_templated():
    with pytest.raises(TypeError):
        RegisterModelOperator("register", {}, "digits", "val_loss")  # type: ignore[misc]
    assert {"train_result", "model_name", "metric", "mode", "min_delta", "data_cutoff", "alias"} <= set(
        RegisterModelOperator.template_fields
    )
