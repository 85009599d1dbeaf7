"""Generated registry histories (see :mod:`.registry_history`): the champion for every date, the live
alias and the training skip decision after every step, checked against :mod:`.registry_model`.
6 histories of up to 10 steps in ``make test`` (seed 46), more in ``make soak``."""

from __future__ import annotations

import os
import time

import pytest

from airflow_provider_dltrain.store.config import TrackingConfig
from tests.contract.contract_checks import contract_settings, run_seeds
from tests.contract.registry_history import STATS, STORE, RegistryHistory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy("real MLflow on SQLite: each history registers and gates versions (about 20 s)"),
]

HISTORIES = int(os.environ.get("DLTRAIN_CONTRACT_REGISTRY_HISTORIES", "6"))
SEED = int(os.environ.get("DLTRAIN_CONTRACT_SEED", "46"))
MINUTES = float(os.environ.get("DLTRAIN_CONTRACT_MINUTES", "0") or 0)


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> TrackingConfig:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path_factory.mktemp('registry-contract') / 'mlflow.db'}"
    config = TrackingConfig(tracking_uri=uri)
    config.client().search_experiments()  # the migrations, once for the module
    return config


def test_generated_registry_histories_give_each_date_its_champion_and_skip_decision(tracking) -> None:
    STORE["tracking"] = tracking
    started = time.monotonic()
    # the soak gives the registry histories a fifth of its minutes
    config = contract_settings(HISTORIES, steps=10)
    run_seeds(RegistryHistory, "registry", config, SEED, MINUTES * 60 * 0.2)
    print(
        f"{STATS['histories']} registry histories, {STATS['steps']} steps in {time.monotonic() - started:.1f} s"
    )
    assert STATS["histories"] >= HISTORIES


def test_repromoting_an_older_version_for_a_later_cutoff_keeps_its_earlier_dates(tracking) -> None:
    """Found by the generated registry histories: gating a promoted version again for a later cut-off
    moved its one promotion record, and the dates before lost the champion that scored them. It is now
    refused, naming why, before anything changes."""
    from airflow_provider_dltrain.registry import champion_as_of
    from airflow_provider_dltrain.registry.promote import gate_and_promote
    from airflow_provider_dltrain.registry.register import register_model
    from tests.contract.registry_history import GATE

    name = "contract-repromote"
    register_model(
        tracking, model_name=name, model_uri="file:///dltrain-contract/repromote/1", metrics={"acc": 0.5}
    )
    gate_and_promote(tracking, model_name=name, version=1, gate=GATE, data_cutoff="2025-01-03")
    assert champion_as_of(tracking, name, "2025-01-31").version == 1
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    with pytest.raises(InvalidSpecError, match=r"champion from cut-off 2025-01-03.*Register a new version"):
        gate_and_promote(tracking, model_name=name, version=1, gate=GATE, data_cutoff="2025-06-20")
    found = champion_as_of(tracking, name, "2025-01-31")  # the nightly of 2025-01-31 was scored by v1
    assert found is not None and found.version == 1
