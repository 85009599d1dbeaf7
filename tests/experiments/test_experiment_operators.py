"""The experiment operators fail fast (no retries) on a bad spec, naming the field."""

from __future__ import annotations

import pytest
from airflow.exceptions import AirflowFailException

from airflow_provider_dltrain.operators.experiments import ExpandTrialsOperator, SelectBestTrialOperator
from airflow_provider_dltrain.operators.training import _trial

REF = {"uri": "/nowhere/digits", "version": 0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search": {"grid": {"lr": 0.1}}}, "search.grid.lr"),
        ({"search": "{not json"}, "search is text but not JSON"),
        ({"search": {"grid": {"lr": [0.1]}}, "early_stopping": {"rule": "median"}}, "metric"),
    ],
)
def test_expanding_a_bad_search_fails_without_retries_and_names_the_field(kwargs, message):
    op = ExpandTrialsOperator(task_id="trials", dataset=REF, **kwargs)
    with pytest.raises(AirflowFailException, match=message):
        op.execute(context={})


def test_selecting_on_a_metric_no_trial_returned_fails_without_retries():
    results = [{"run_id": "r1", "model_uri": "models:/m/1", "metrics": {"val_loss": 0.3}, "params": {}}]
    op = SelectBestTrialOperator(task_id="best", trial_results=results, metric="val_accuracy", mode="max")
    with pytest.raises(AirflowFailException, match="val_accuracy"):
        op.execute(context={})


def test_a_trial_argument_needs_a_name_and_a_parent_run():
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    assert _trial(None) is None
    assert _trial('{"name": "trial-00", "parent_run_id": "p"}')["name"] == "trial-00"
    with pytest.raises(InvalidSpecError, match="parent_run_id"):
        _trial({"name": "trial-00"})
