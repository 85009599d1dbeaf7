"""The "Job console" extra link: no lookup (and no "XCom not found" error in the task log) for in-process tasks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_dltrain.operators.engine_run import EngineJobLink


@pytest.fixture
def lookups(monkeypatch):
    from airflow.providers.common.compat.sdk import XCom

    calls = []

    def get_value(**kwargs):
        calls.append(kwargs)
        return {"console_url": "https://console.aws.amazon.com/gluestudio/home#/job/x/run/jr_1"}

    monkeypatch.setattr(XCom, "get_value", staticmethod(get_value))
    return calls


@pytest.mark.parametrize(
    "operator", [SimpleNamespace(engine="local"), SimpleNamespace(backend="torch_distributor")]
)
def test_an_in_process_task_has_no_job_link_and_asks_for_none(operator, lookups):
    assert EngineJobLink().get_link(operator, ti_key=object()) == ""
    assert lookups == []


@pytest.mark.parametrize(
    "operator", [SimpleNamespace(engine="glue"), SimpleNamespace(backend="sagemaker"), SimpleNamespace()]
)
def test_a_cloud_task_links_to_the_job_it_recorded(operator, lookups):
    assert EngineJobLink().get_link(operator, ti_key=object()).endswith("/run/jr_1")
    assert len(lookups) == 1
