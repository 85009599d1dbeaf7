"""Modules that moved keep their old paths: DAGs, notebooks and scripts written against them keep
working (the same module objects, so settings and patches apply to both) and say where they went."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVED = {
    "airflow_provider_dltrain.champion": "airflow_provider_dltrain.commands.champion",
    "airflow_provider_dltrain.connections": "airflow_provider_dltrain.commands.connections",
    "airflow_provider_dltrain.history_command": "airflow_provider_dltrain.commands.history",
    "airflow_provider_dltrain.reap_command": "airflow_provider_dltrain.commands.reap",
    "airflow_provider_dltrain.jobs.rerun_check": "airflow_provider_dltrain.etl.rerun_check",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_old_module_path_is_the_same_module_and_warns(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is new
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == [
        f"{old} moved to {MOVED[old]}"
    ]


def test_the_write_options_are_one_class_wherever_they_are_imported_from():
    from airflow_provider_dltrain.etl.write_options import DeltaWriteOptions
    from airflow_provider_dltrain.operators import DeltaWriteOptions as exported
    from airflow_provider_dltrain.operators.spark import DeltaWriteOptions as documented

    assert exported is documented is DeltaWriteOptions
