"""The tracking store moved from ``registry`` to ``store``: DAGs and notebooks written against the old
module paths keep working (the same module objects, so settings and patches apply to both), and say
where it went."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVED = ("config", "client", "models", "loading", "gate", "resolve")


@pytest.mark.parametrize("name", MOVED)
def test_the_old_module_path_is_the_same_module_and_warns(name):
    new = importlib.import_module(f"airflow_provider_dltrain.store.{name}")
    sys.modules.pop(f"airflow_provider_dltrain.registry.{name}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module(f"airflow_provider_dltrain.registry.{name}")
    assert old is new
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == [
        f"airflow_provider_dltrain.registry.{name} moved to airflow_provider_dltrain.store.{name}"
    ]


def test_the_registry_package_still_exports_the_store_names_and_champion_history_is_the_function():
    from airflow_provider_dltrain import registry
    from airflow_provider_dltrain.store import champion_history, config, resolve

    assert registry.TrackingConfig is config.TrackingConfig
    assert registry.resolve_model is resolve.resolve_model
    assert registry.champion_history is champion_history.champion_history
    assert callable(registry.champion_history)
