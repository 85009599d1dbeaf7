"""resolve_model: every spec form batch inference may pass, against a real MLflow store."""

from __future__ import annotations

import shutil

import pytest
from registry_helpers import make_train

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry import (
    GateSpec,
    ModelNotFoundError,
    register_and_promote,
    resolve_model,
)
from airflow_provider_dltrain.store.config import TrackingConfig

MODEL = "digits"


@pytest.fixture(scope="module")
def store(tmp_path_factory, _migrated_mlflow_db):
    """One store for the module (it is only read): a fresh copy of the migrated template."""
    root = tmp_path_factory.mktemp("resolve")
    shutil.copy(_migrated_mlflow_db, root / "mlflow.db")
    tracking = TrackingConfig(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    return tracking, make_train(tracking, root / "artifacts")


@pytest.fixture(scope="module")
def history(store):
    """v1 champion from 11-01, v2 live from 11-10, v3 rejected, v4 backfilled champion for 11-05."""
    tracking, train = store
    refs = []
    for cutoff, loss in [
        ("2026-11-01", 0.5),
        ("2026-11-10", 0.4),
        ("2026-11-12", 0.45),
        ("2026-11-05", 0.45),
    ]:
        result = train(cutoff, {"val_loss": loss})
        outcome = register_and_promote(
            tracking,
            model_name=MODEL,
            model_uri=result["model_uri"],
            run_id=result["run_id"],
            metrics=result["metrics"],
            gate=GateSpec(metric="val_loss"),
        )
        refs.append(outcome.to_model_ref())
    return refs


@pytest.fixture
def tracking(store, history):
    return store[0]


def test_every_spec_form_resolves_to_one_pinned_version(tracking, history):
    def version(spec, as_of=None):
        return resolve_model(tracking, spec, as_of=as_of).version

    assert version("models:/digits/3") == 3
    assert version("models:/digits@champion") == 2
    assert version({"name": MODEL, "alias": "champion"}) == 2
    assert version({"name": MODEL}) == 2
    assert version({"name": MODEL, "version": 3}) == 3
    assert version({"name": MODEL, "version": "1"}) == 1
    assert version({"name": MODEL, "champion_as_of": "2026-11-06"}) == 4
    assert version('{"name": "digits", "champion_as_of": "2026-11-02"}') == 1
    resolved = resolve_model(tracking, {"name": MODEL, "version": 3})
    assert (resolved.name, resolved.model_uri) == (MODEL, "models:/digits/3")


def test_as_of_reproduces_the_champion_of_a_backfilled_date(tracking, history):
    spec = {"name": MODEL, "alias": "champion"}
    assert resolve_model(tracking, spec, as_of="2026-11-07").version == 4
    assert resolve_model(tracking, spec, as_of="2026-11-03").version == 1
    assert resolve_model(tracking, spec, as_of="2026-11-30").version == 2
    assert resolve_model(tracking, {"name": MODEL, "version": 3}, as_of="2026-11-03").version == 3


def test_a_model_ref_resolves_to_the_champion_its_gate_chose_never_a_rejected_candidate(tracking, history):
    rejected = history[2]
    assert rejected["promoted"] is False and rejected["version"] == 3
    assert resolve_model(tracking, rejected).version == rejected["champion_version"] == 2


def test_other_uris_pass_through_unchanged(tracking, history):
    resolved = resolve_model(tracking, "runs:/abc/model")
    assert (resolved.name, resolved.version, resolved.model_uri) == (None, None, "runs:/abc/model")


@pytest.mark.parametrize(
    ("spec", "as_of", "message"),
    [
        ("models:/digits/9", None, "no version 9"),
        ("models:/digits@staging", None, "no alias 'staging'"),
        ({"name": MODEL, "champion_as_of": "2026-10-01"}, None, "no 'champion' for data cut-off 2026-10-01"),
        ({"name": MODEL}, "2026-10-01", "no 'champion' for data cut-off 2026-10-01"),
        ({"name": "unknown"}, None, "no alias 'champion'"),
    ],
)
def test_what_does_not_exist_raises_model_not_found_naming_it(tracking, history, spec, as_of, message):
    with pytest.raises(ModelNotFoundError, match=message):
        resolve_model(tracking, spec, as_of=as_of)


@pytest.mark.parametrize("spec", [42, {"alias": "champion"}, {"name": MODEL, "version": "x"}, "{not json"])
def test_malformed_specs_raise_invalid_spec(tracking, spec):
    with pytest.raises(InvalidSpecError):
        resolve_model(tracking, spec)


def test_a_model_without_recorded_history_falls_back_to_the_live_alias(tracking, store):
    result = store[1]("2026-11-01", {"val_loss": 0.5})
    client = tracking.client()
    client.create_registered_model("handmade")
    client.create_model_version("handmade", f"runs:/{result['run_id']}/model", run_id=result["run_id"])
    client.set_registered_model_alias("handmade", "champion", "1")
    assert resolve_model(tracking, {"name": "handmade"}, as_of="2026-11-01").version == 1
