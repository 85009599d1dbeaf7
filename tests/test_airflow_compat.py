"""The names that moved between Airflow 3.1 and 3.3 resolve, on every minor, to what Airflow itself uses.

``make test-compat`` runs this file in every cell of the matrix (Airflow 3.1 on the floor, 3.2, 3.3):
on each side of a move the provider must raise the very classes the task runner catches, or a user
error would be retried and a skip would fail the task.
"""

from __future__ import annotations

import warnings

import pytest

from airflow_provider_dltrain import airflow_compat

MOVED = (
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "TaskDeferred",
)


@pytest.mark.parametrize("name", MOVED)
def test_each_task_exception_is_the_class_airflows_own_modules_raise_and_catch(name):
    import airflow.exceptions

    with warnings.catch_warnings():  # 3.3 keeps airflow.exceptions as a deprecated alias of the SDK's
        warnings.simplefilter("ignore")
        core = getattr(airflow.exceptions, name)
    assert getattr(airflow_compat, name) is core


@pytest.mark.parametrize(("setting", "expected"), [("True", True), ("False", False)])
def test_default_deferrable_follows_the_operators_setting(monkeypatch, setting, expected):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", setting)
    assert airflow_compat.default_deferrable() is expected


def test_the_configuration_comes_from_the_task_sdk_where_airflow_has_one():
    from importlib.util import find_spec

    sdk_has_conf = find_spec("airflow.sdk.configuration") is not None
    assert type(airflow_compat.conf).__module__ == (
        "airflow.sdk.configuration" if sdk_has_conf else "airflow.configuration"
    )
