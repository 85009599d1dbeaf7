"""The fair gate: challenger and champion scored by one function on the same rows, for real.

Two demo CNNs are trained once per module on a real Delta table (the champion on day 1 only, the
challenger on days 1-2) and logged to a real MLflow SQLite store in pt2 format; each test registers
them under its own model name.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.exceptions import AirflowFailException
from rescoring_helpers import DAYS, DEMO_EVALUATE, score_by_hand, write_digits

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.operators.registry import RegisterModelOperator
from airflow_provider_dltrain.registry import GateEvaluation, GateSpec, register_and_promote
from airflow_provider_dltrain.store.config import TrackingConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from deletion_vectors import delete_with_deletion_vector

ACCURACY = GateSpec(metric="val_accuracy", mode="max")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> DeltaRef:
    """Versions 0, 1, 2 add partitions ds = DAYS[0], DAYS[1], DAYS[2]."""
    return write_digits(str(tmp_path_factory.mktemp("rescoring-lake") / "digits"))


@pytest.fixture(scope="module")
def store(tmp_path_factory, _migrated_mlflow_db) -> TrackingConfig:
    import shutil

    path = tmp_path_factory.mktemp("rescoring-mlflow") / "mlflow.db"
    shutil.copy(_migrated_mlflow_db, path)
    return TrackingConfig(tracking_uri=f"sqlite:///{path}")


@pytest.fixture(scope="module")
def trained(digits, store) -> SimpleNamespace:
    """champion: 1 epoch on DAYS[0]; challenger: 3 epochs on DAYS[0..1] (both at table version 1)."""
    from airflow_provider_dltrain.training import LocalBackend, run_training

    def fit(day: str, epochs: int, seed: int):
        return run_training(
            "airflow_provider_dltrain.demo.digits_model:train",
            {"uri": digits.uri, "version": 1},
            {"epochs": epochs, "batch_size": 64, "seed": seed},
            backend=LocalBackend(num_threads=1),
            data_filter=[["ds", "<=", day]],
            tracking=store,
            experiment_name="gate-rescoring",
        )

    return SimpleNamespace(champion=fit(DAYS[0], 1, 1), challenger=fit(DAYS[1], 3, 2))


@pytest.fixture
def name(request) -> str:
    """A registered model name of this test's own (the store is shared by the module)."""
    return "digits_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")


def promote(store, name, result, evaluation=None, **kwargs):
    return register_and_promote(
        store,
        model_name=name,
        model_uri=result.model_uri,
        run_id=result.run_id,
        metrics=result.metrics,
        params=result.params,
        gate=kwargs.pop("gate", ACCURACY),
        data_cutoff=kwargs.pop("cutoff", None),
        evaluation=evaluation,
        **kwargs,
    )


def counting(evaluate_fn):
    """``evaluate_fn`` that counts its calls in ``.calls``."""
    from airflow_provider_dltrain.registry.evaluate import load_evaluate_fn

    inner = load_evaluate_fn(evaluate_fn)

    def evaluate(ctx, model):
        evaluate.calls += 1  # type: ignore[attr-defined]
        return inner(ctx, model)

    evaluate.calls = 0  # type: ignore[attr-defined]
    return evaluate


def test_the_champion_is_rescored_on_the_challengers_validation_rows(store, trained, name, tmp_path):
    champ, chall = trained.champion, trained.challenger
    first = promote(store, name, champ, GateEvaluation(DEMO_EVALUATE))
    assert first.promoted and first.basis == "rescored" and first.champion_value is None
    outcome = promote(store, name, chall, GateEvaluation(DEMO_EVALUATE))

    rows = [["ds", "<=", DAYS[1]]]
    by_hand = {v: score_by_hand(store, f"models:/{name}/{v}", chall.dataset, rows, tmp_path) for v in (1, 2)}
    own_rows = score_by_hand(store, champ.model_uri, champ.dataset, [["ds", "<=", DAYS[0]]], tmp_path)["rows"]
    tags = store.client().get_model_version(name, "2").tags
    assert tags["dltrain.gate.basis"] == "rescored"
    assert float(tags["dltrain.gate.candidate_value"]) == pytest.approx(by_hand[2]["val_accuracy"], abs=1e-12)
    assert float(tags["dltrain.gate.champion_value"]) == pytest.approx(by_hand[1]["val_accuracy"], abs=1e-12)
    assert int(tags["dltrain.gate.eval_rows"]) == by_hand[2]["rows"] > own_rows  # not the champion's rows
    assert json.loads(tags["dltrain.gate.eval_data"]) == {
        "delta_ref": chall.dataset.to_dict(),
        "data_filter": [[["ds", "<=", DAYS[1]]]],
    }
    assert tags["dltrain.gate.eval_fn"] == DEMO_EVALUATE and tags["dltrain.gate.compared_with"] == "1"
    assert (
        tags["dltrain.gate.rule"]
        == f"{ACCURACY.rule} rescored by {DEMO_EVALUATE} on challenger-training-data"
    )
    assert outcome.promoted is (by_hand[2]["val_accuracy"] > by_hand[1]["val_accuracy"])
    assert f"on the same {by_hand[2]['rows']} rows of {chall.dataset.uri}@v1" in outcome.reason
    ref = outcome.to_model_ref()
    assert (ref["candidate_value"], ref["champion_value"]) == (
        float(tags["dltrain.gate.candidate_value"]),
        float(tags["dltrain.gate.champion_value"]),
    )
    assert ref["basis"] == "rescored" and ref["eval_rows"] == by_hand[2]["rows"]


def test_a_fixed_evaluation_table_version_is_scored_when_given(store, trained, digits, name, tmp_path):
    holdout = [["ds", "=", DAYS[2]]]  # a day neither model trained on, in a later table version
    evaluation = GateEvaluation(DEMO_EVALUATE, dataset=digits.to_dict(), data_filter=holdout)
    promote(store, name, trained.champion, evaluation)
    outcome = promote(store, name, trained.challenger, evaluation)

    by_hand = {v: score_by_hand(store, f"models:/{name}/{v}", digits, holdout, tmp_path) for v in (1, 2)}
    tags = store.client().get_model_version(name, "2").tags
    assert json.loads(tags["dltrain.gate.eval_data"]) == {
        "delta_ref": digits.to_dict(),
        "data_filter": [[["ds", "=", DAYS[2]]]],
    }
    assert float(tags["dltrain.gate.candidate_value"]) == pytest.approx(by_hand[2]["val_accuracy"], abs=1e-12)
    assert float(tags["dltrain.gate.champion_value"]) == pytest.approx(by_hand[1]["val_accuracy"], abs=1e-12)
    assert int(tags["dltrain.gate.eval_rows"]) == by_hand[1]["rows"] == outcome.eval_rows
    assert f"on {digits.uri}@v{digits.version} filter=" in tags["dltrain.gate.rule"]


def test_a_tie_on_the_same_rows_never_promotes(store, trained, name):
    same_for_all = counting(lambda ctx, model: {"val_accuracy": 0.75})
    promote(store, name, trained.champion, GateEvaluation(same_for_all))
    outcome = promote(store, name, trained.challenger, GateEvaluation(same_for_all))
    assert not outcome.promoted and "not better" in outcome.reason
    assert (outcome.candidate_value, outcome.champion_value) == (0.75, 0.75)
    assert outcome.champion_version == 1 and same_for_all.calls == 3  # champion once, then both


def test_a_replay_scores_nothing_and_returns_the_same_decision(store, trained, name):
    evaluate = counting(DEMO_EVALUATE)
    promote(store, name, trained.champion, GateEvaluation(evaluate))
    first = promote(store, name, trained.challenger, GateEvaluation(evaluate))
    calls = evaluate.calls
    again = promote(store, name, trained.challenger, GateEvaluation(evaluate))
    assert evaluate.calls == calls == 3
    assert again == first
    assert len(store.client().search_model_versions(f"name = '{name}'")) == 2


def test_another_basis_is_a_new_rule_and_decides_again(store, trained, name, caplog):
    promote(store, name, trained.champion)
    rescored = promote(store, name, trained.challenger, GateEvaluation(DEMO_EVALUATE))
    assert rescored.basis == "rescored"
    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.registry.promote"):
        recorded = promote(store, name, trained.challenger)
    assert "measured on its own validation rows" in caplog.text
    tags = store.client().get_model_version(name, "2").tags
    assert recorded.basis == tags["dltrain.gate.basis"] == "recorded"
    assert tags["dltrain.gate.rule"] == ACCURACY.rule
    assert not {"dltrain.gate.eval_data", "dltrain.gate.eval_rows", "dltrain.gate.eval_fn"} & set(tags)
    assert recorded.candidate_value == trained.challenger.metrics["val_accuracy"]
    assert recorded.champion_value == trained.champion.metrics["val_accuracy"]


def test_an_evaluation_without_the_gate_metric_fails_naming_it_and_decides_nothing(store, trained, name):
    with pytest.raises(InvalidSpecError, match="without the gate metric 'val_accuracy'"):
        promote(store, name, trained.champion, GateEvaluation(lambda ctx, model: {"loss": 0.1}))
    assert "dltrain.gate.decision" not in store.client().get_model_version(name, "1").tags


def test_an_evaluation_function_that_does_not_import_fails_before_registering(store, trained, name):
    with pytest.raises(InvalidSpecError, match="cannot import 'no_such_module'"):
        promote(store, name, trained.champion, GateEvaluation("no_such_module:evaluate"))
    assert store.client().search_model_versions(f"name = '{name}'") == []


def test_the_training_hparams_are_kept_on_the_version_for_the_evaluation(store, trained, name):
    promote(store, name, trained.champion, GateEvaluation(DEMO_EVALUATE))
    tags = store.client().get_model_version(name, "1").tags
    assert json.loads(tags["dltrain.hparams"]) == trained.champion.params


def test_rows_a_deletion_vector_removed_are_not_among_the_gates_evaluation_rows(
    store, trained, name, tmp_path
):
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.table import TableFeatures

    uri = str(tmp_path / "holdout")
    write_digits(uri, DAYS[2:])
    DeltaTable(uri).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    (path,) = (Path(uri) / f"ds={DAYS[2]}").glob("*.parquet")
    every = pq.read_table(path, columns=["source_file"]).column("source_file").to_pylist()
    delete_with_deletion_vector(uri, {"ds": DAYS[2]}, [0, 1, 2])
    seen: list[list[str]] = []

    def evaluate(ctx, model):
        seen.append(
            [k for batch in ctx.dataloader(100, columns=["source_file"]) for k in batch["source_file"]]
        )
        return {"val_accuracy": 0.5}

    promote(store, name, trained.champion)
    outcome = promote(
        store, name, trained.challenger, GateEvaluation(evaluate, dataset={"uri": uri, "version": 2})
    )
    assert len(seen) == 2  # challenger and champion
    assert all(sorted(rows) == sorted(every[3:]) for rows in seen)
    assert outcome.eval_rows == len(every) - 3


# -- RegisterModelOperator -------------------------------------------------------------------------


def run_operator(store, monkeypatch, result, ds, run_id=None, **kwargs) -> dict:
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_DEFAULT", json.dumps({"conn_type": "mlflow", "host": store.tracking_uri})
    )
    op = RegisterModelOperator(
        task_id="register",
        train_result=json.loads(json.dumps(result.to_dict())),  # as pulled from XCom
        metric="val_accuracy",
        mode="max",
        data_cutoff="{{ ds }}",
        **kwargs,
    )
    run_id = run_id or f"scheduled__{ds}T00:00:00+00:00"
    ti = SimpleNamespace(dag_id="retrain", run_id=run_id, task_id="register", try_number=1)
    ctx = {"ti": ti, "run_id": run_id, "ds": ds, "logical_date": None}
    op.render_template_fields(ctx)
    return op.execute(ctx)


def test_the_operator_rescores_both_models_with_evaluate_fn(store, trained, name, monkeypatch, capsys):
    run_operator(store, monkeypatch, trained.champion, DAYS[0], model_name=name, evaluate_fn=DEMO_EVALUATE)
    ref = run_operator(
        store, monkeypatch, trained.challenger, DAYS[1], model_name=name, evaluate_fn=DEMO_EVALUATE
    )
    assert json.loads(json.dumps(ref)) == ref
    tags = store.client().get_model_version(name, "2").tags
    assert ref["basis"] == "rescored" and ref["compared_with"] == 1
    assert ref["candidate_value"] == float(tags["dltrain.gate.candidate_value"])
    assert ref["champion_value"] == float(tags["dltrain.gate.champion_value"])
    assert ref["eval_rows"] == int(tags["dltrain.gate.eval_rows"])
    line = f"Rescored val_accuracy: candidate {ref['candidate_value']}, champion {ref['champion_value']}"
    assert line in capsys.readouterr().out


def test_registering_a_gated_run_again_loads_no_model_and_replays_the_same_answer(
    store, trained, name, monkeypatch
):
    from airflow_provider_dltrain.registry import evaluate, loading

    kwargs = {"model_name": name, "evaluate_fn": DEMO_EVALUATE}
    run_operator(store, monkeypatch, trained.champion, DAYS[0], **kwargs)
    first = run_operator(store, monkeypatch, trained.challenger, DAYS[1], **kwargs)
    loads: list[str] = []
    for module, fn in (
        (loading, "load_torch_model"),
        (loading, "check_loadable"),
        (evaluate, "load_version"),
    ):
        monkeypatch.setattr(module, fn, lambda *a, _fn=fn, **k: loads.append(_fn))
    # the same training run again: the task cleared, or a manual run of the same date
    for run_id in (None, f"manual__{DAYS[1]}T06:00:00+00:00"):
        assert run_operator(store, monkeypatch, trained.challenger, DAYS[1], run_id, **kwargs) == first
    assert loads == []
    assert len(store.client().search_model_versions(f"name = '{name}'")) == 2


def test_the_operator_scores_a_templated_fixed_evaluation_table(
    store, trained, digits, name, monkeypatch, tmp_path
):
    kwargs = {
        "model_name": name,
        "evaluate_fn": DEMO_EVALUATE,
        "evaluation_dataset": digits.to_dict(),
        "evaluation_filter": [["ds", "=", "{{ ds }}"]],
    }
    run_operator(store, monkeypatch, trained.champion, DAYS[2], **kwargs)
    ref = run_operator(store, monkeypatch, trained.challenger, DAYS[2], **kwargs)
    by_hand = score_by_hand(store, f"models:/{name}/2", digits, [["ds", "=", DAYS[2]]], tmp_path)
    assert ref["candidate_value"] == pytest.approx(by_hand["val_accuracy"], abs=1e-12)
    assert ref["eval_rows"] == by_hand["rows"]


def test_the_operator_refuses_an_evaluation_dataset_without_evaluate_fn(store, trained, name, monkeypatch):
    with pytest.raises(AirflowFailException, match="need evaluate_fn"):
        run_operator(
            store,
            monkeypatch,
            trained.champion,
            DAYS[0],
            model_name=name,
            evaluation_dataset={"uri": "/t", "version": 0},
        )
    assert {"evaluate_fn", "evaluation_dataset", "evaluation_filter"} <= set(
        RegisterModelOperator.template_fields
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"evaluate_fn": "no_colon"}, "'package.module:function'"),
        ({"evaluate_fn": DEMO_EVALUATE, "data_filter": [["ds", "=", "x"]]}, "needs an evaluation dataset"),
        ({"evaluate_fn": DEMO_EVALUATE, "dataset": {"uri": "/t"}}, "needs keys"),
        (
            {"evaluate_fn": DEMO_EVALUATE, "dataset": {"uri": "/t", "version": 0}, "data_filter": "x"},
            "not JSON",
        ),
    ],
)
def test_a_malformed_evaluation_spec_names_the_bad_field(kwargs, message):
    with pytest.raises(InvalidSpecError, match=message):
        GateEvaluation(**kwargs)
