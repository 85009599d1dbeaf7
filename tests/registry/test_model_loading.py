"""Our model loads refuse pickle-format versions unless allowed; training logs pt2 only."""

from __future__ import annotations

import logging
import os

import pytest

from airflow_provider_dltrain.exceptions import DltrainUserError, UnsafeModelError
from airflow_provider_dltrain.registry import (
    GateEvaluation,
    GateSpec,
    load_version,
    loading,
    register_and_promote,
    register_model,
)
from airflow_provider_dltrain.store.client import get_version

MODEL = "digits"


def pickled_version(tracking, train, cutoff="2026-11-01"):
    """``registry_helpers.make_train`` logs with serialization_format="pickle"."""
    result = train(cutoff, {"val_loss": 0.5})
    mv = register_model(tracking, model_name=MODEL, model_uri=result["model_uri"], run_id=result["run_id"])
    return result, mv


def test_load_version_refuses_a_pickled_version_naming_it_and_how_to_relog_it(tracking, train):
    _, mv = pickled_version(tracking, train)
    with pytest.raises(UnsafeModelError) as err:
        load_version(tracking, mv)
    text = str(err.value)
    assert isinstance(err.value, DltrainUserError)
    assert f"model 'digits' version {mv.version} (models:/digits/{mv.version})" in text
    assert "pickle format (data/model.pth + pickle_module_info.txt)" in text
    assert "serialization_format='pt2'" in text and "allow_pickle=True" in text


def test_load_version_with_allow_pickle_loads_it_and_logs_a_warning(tracking, train, caplog):
    import torch

    _, mv = pickled_version(tracking, train)
    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.store.loading"):
        model = load_version(tracking, mv, allow_pickle=True)
    assert isinstance(model, torch.nn.Linear) and not model.training
    assert "allow_pickle=True" in caplog.text and f"version {mv.version}" in caplog.text


@pytest.mark.parametrize("callers_value", [None, "true", "1"])
def test_mlflow_refuses_pickle_even_if_our_inspection_were_fooled_and_the_env_is_restored(
    tracking, train, monkeypatch, callers_value
):
    _, mv = pickled_version(tracking, train)
    if callers_value is None:
        monkeypatch.delenv(loading.ALLOW_PICKLE_ENV, raising=False)
    else:
        monkeypatch.setenv(loading.ALLOW_PICKLE_ENV, callers_value)
    monkeypatch.setattr(loading, "inspect_dir", lambda path: loading.ModelFormat(loading.PT2, "fooled"))

    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match="Deserializing model using pickle is disallowed"):
        load_version(tracking, mv)
    assert os.environ.get(loading.ALLOW_PICKLE_ENV) == callers_value


def test_pickle_switch_sets_false_unless_allowed_and_restores(monkeypatch):
    monkeypatch.setenv(loading.ALLOW_PICKLE_ENV, "true")
    with loading.pickle_switch(False):
        assert os.environ[loading.ALLOW_PICKLE_ENV] == "false"
    with loading.pickle_switch(True):
        assert os.environ[loading.ALLOW_PICKLE_ENV] == "true"
    assert os.environ[loading.ALLOW_PICKLE_ENV] == "true"
    monkeypatch.delenv(loading.ALLOW_PICKLE_ENV)
    with pytest.raises(RuntimeError), loading.pickle_switch(False):
        raise RuntimeError("boom")
    assert loading.ALLOW_PICKLE_ENV not in os.environ


def test_rescoring_gate_refuses_a_pickled_candidate_before_evaluating_anything(tracking, train):
    calls = []

    def evaluate(ctx, model):
        calls.append(model)
        return {"val_loss": 0.1}

    result = train("2026-11-01", {"val_loss": 0.5})
    with pytest.raises(UnsafeModelError, match=r"model 'digits' version 1 .*serialization_format='pt2'"):
        register_and_promote(
            tracking,
            model_name=MODEL,
            model_uri=result["model_uri"],
            run_id=result["run_id"],
            metrics=result["metrics"],
            gate=GateSpec("val_loss"),
            data_cutoff="2026-11-01",
            evaluation=GateEvaluation(evaluate),
        )
    assert calls == []
    assert "dltrain.gate.decision" not in get_version(tracking.client(), MODEL, 1).tags


def test_gate_evaluation_refuses_a_non_boolean_allow_pickle():
    with pytest.raises(DltrainUserError, match="allow_pickle must be True or False"):
        GateEvaluation(lambda ctx, model: {}, allow_pickle="yes")  # type: ignore[arg-type]


def test_code_paths_count_as_running_code(tmp_path):
    fmt = loading.classify({"pytorch": {"model_data": "data", "code": "code"}}, ["data/model.pt2"], "m")
    assert fmt.serialization == loading.PT2 and fmt.runs_code
    with pytest.raises(UnsafeModelError, match="ships code_paths"):
        loading.require_safe(fmt, "model m", allow_pickle=False)
    assert not loading.classify({"pytorch": {"model_data": "data"}}, ["data/model.pt2"], "m").runs_code
    # model.pth wins in MLflow's loader, so a pt2 archive next to it does not make the model safe.
    both = loading.classify({"pytorch": {"model_data": "data"}}, ["data/model.pt2", "data/model.pth"], "m")
    assert both.serialization == loading.PICKLE
    assert loading.classify({"pytorch": {"model_data": "data/model.pth"}}, [], "m").serialization == "pickle"


def test_training_tracker_logs_pt2_and_checks_it(tracking, tmp_path, monkeypatch):
    import torch

    from airflow_provider_dltrain.training import tracking as tracking_module
    from airflow_provider_dltrain.training.tracking import MlflowRankTracker

    client = tracking.client()
    experiment = client.create_experiment("tracker", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(experiment).info.run_id
    tracker = MlflowRankTracker(str(tmp_path / "ckpt"), tracking, run_id)
    uri = tracker.log_model(torch.nn.Linear(3, 2), torch.zeros(4, 3))

    assert tracking_module.SERIALIZATION_FORMAT == "pt2"
    fmt = loading.inspect_uri(uri, tracking)
    assert fmt.serialization == "pt2" and not fmt.runs_code, fmt

    monkeypatch.setattr(tracking_module, "SERIALIZATION_FORMAT", "pickle")  # as if pt2 were not honoured
    with pytest.raises(UnsafeModelError, match="not a plain pt2 export"):
        tracker.log_model(torch.nn.Linear(3, 2), torch.zeros(4, 3), name="again")
