"""``TrainingRequest``: the one description of a training run that ``run_training``, the operator and
the remote launcher share, checked before any work starts. Nothing here trains."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.request import TrainingRequest
from airflow_provider_dltrain.training.runner import run_training

DATASET = {"uri": "/nowhere/digits", "version": 3}
STOPPING = {"spec": {"rule": "median", "metric": "val_loss"}, "parent_run_id": "p1", "trial": "t0"}


class _Captured(Exception):
    """Raised by a stand-in for the training itself, carrying the request it was given."""

    def __init__(self, request: TrainingRequest) -> None:
        super().__init__("captured")
        self.request = request


def _capture(request: TrainingRequest) -> Any:
    raise _Captured(request)


@pytest.fixture
def no_work(monkeypatch) -> None:
    """Any step that would read data, start a backend or a job fails the test."""

    def forbid(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work started before the request was checked")

    monkeypatch.setattr("airflow_provider_dltrain.training.runner.get_backend", forbid)
    monkeypatch.setattr("airflow_provider_dltrain.training.runner.start_tracked_run", forbid)
    monkeypatch.setattr("airflow_provider_dltrain.training.remote.run_remote", forbid)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"non_finite": "ignore"}, r"^non_finite must be one of"),
        ({"cutoff": "2026-11-28 junk"}, r"^cutoff='2026-11-28 junk' is not a date"),
        ({"extra_tracking": {"neptune": {}}}, r"^extra_tracking has unknown targets \['neptune'\]"),
        ({"tracking": False, "backend": "ec2"}, r"not tracking=False$"),
        ({"early_stopping": STOPPING, "backend": "ray"}, r"^early stopping runs on the in-process"),
        ({"early_stopping": {"spec": STOPPING["spec"]}}, r"^early_stopping needs .*'parent_run_id', 'trial'"),
        ({"early_stopping": STOPPING, "tracking": False}, r"^early_stopping needs .*tracking=False"),
        ({"early_stopping": {**STOPPING, "spec": {"rule": "median"}}}, r"^early_stopping needs 'rule'"),
    ],
)
def test_a_bad_field_is_refused_naming_it_before_any_work(bad, message, no_work):
    with pytest.raises(InvalidSpecError, match=message):
        TrainingRequest("training_fns:keyless_train", DATASET, **bad)
    with pytest.raises(InvalidSpecError, match=message):
        run_training("training_fns:keyless_train", DATASET, **bad)


def test_run_training_keywords_build_the_request_built_directly(monkeypatch):
    monkeypatch.setattr("airflow_provider_dltrain.training.runner.run_training_request", _capture)
    tracking = TrackingConfig(tracking_uri="sqlite:////tmp/none.db")
    keywords = {
        "backend": "torch_distributor",
        "backend_options": {"num_processes": 2},
        "data_filter": [["ds", "<=", "2026-11-28"]],
        "tracking": tracking,
        "experiment_name": "digits",
        "run_name": "nightly",
        "tags": {"team": "vision"},
        "code_version": "v1.2",
        "early_stopping": STOPPING,
        "non_finite": "allow",
        "extra_tracking": {"wandb": {"project": "digits", "mode": "offline"}},
        "poll_interval": 5,
    }
    with pytest.raises(_Captured) as got:
        run_training("training_fns:keyless_train", DATASET, {"epochs": 1}, **keywords)

    assert got.value.request == TrainingRequest(
        "training_fns:keyless_train", DATASET, {"epochs": 1}, **keywords
    )
    request = got.value.request
    assert request.poll_interval == 5.0 and request.early_stopping["spec"]["rule"] == "median"
    assert replace(request, hparams={"epochs": 2}).hparams == {"epochs": 2}  # a variant is checked too

    with pytest.raises(_Captured) as bare:  # empty values are one request, whichever way given
        run_training("training_fns:keyless_train", DATASET, cutoff="", code_version="", tags=None)
    assert bare.value.request == TrainingRequest("training_fns:keyless_train", DATASET, {}, tags={})
    assert bare.value.request.cutoff is None and bare.value.request.code_version is None


def test_a_cloud_backend_hands_the_same_request_to_the_remote_launcher(monkeypatch):
    monkeypatch.setattr("airflow_provider_dltrain.training.remote.run_remote", _capture)
    with pytest.raises(_Captured) as got:
        run_training("training_fns:keyless_train", DATASET, backend="sagemaker", run_key="k1")
    assert got.value.request == TrainingRequest(
        "training_fns:keyless_train", DATASET, backend="sagemaker", run_key="k1"
    )
    assert got.value.request.remote


class _TI:
    dag_id, task_id, run_id, try_number, map_index = "d", "train", "manual__x", 1, -1

    def xcom_push(self, key: str, value: object) -> None:  # pragma: no cover - training never ran
        raise AssertionError("nothing is pushed before training")


def test_the_operator_and_run_training_build_the_same_request(monkeypatch, tmp_path):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr("airflow_provider_dltrain.training.runner.run_training_request", _capture)
    settings = {
        "hparams": {"epochs": 1, "seed": 3},
        "data_filter": [["ds", "<=", "2026-11-28"]],
        "backend": "local",
        "backend_options": {"num_threads": 1},
        "code_version": "v1.2",
        "non_finite": "fail_at_any_step",
    }
    operator = TrainModelOperator(
        task_id="train",
        dataset=DATASET,
        train_fn="training_fns:keyless_train",
        data_cutoff="2026-11-28",
        experiment_name="digits",
        poll_interval=7,
        **settings,
    )
    with pytest.raises(_Captured) as by_operator:
        operator.execute({"ti": _TI(), "logical_date": None})  # type: ignore[arg-type]
    request = by_operator.value.request

    assert request.tracking.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert request.run_name == "d.train.manual__x" and request.tags["dltrain.dag_id"] == "d"
    with pytest.raises(_Captured) as by_function:
        run_training(
            "training_fns:keyless_train",
            DeltaRef.coerce(DATASET),
            settings.pop("hparams"),
            cutoff="2026-11-28",
            tracking=request.tracking,
            experiment_name="digits",
            run_name=request.run_name,
            tags=request.tags,
            poll_interval=7,
            **settings,
        )
    assert by_function.value.request == request


def test_a_dataset_given_as_json_text_or_as_a_dict_keys_the_same_remote_run():
    """The run key a re-attach looks for: the same table version, however it was spelled."""
    import json

    from airflow_provider_dltrain.training.remote import remote_run_key

    def key(dataset: Any) -> str:
        return remote_run_key(
            TrainingRequest("training_fns:keyless_train", dataset, {"lr": 0.1}, backend="sagemaker")
        )

    spaced = '{ "version": 3,\n  "uri": "/nowhere/digits" }'
    assert key(DATASET) == key(json.dumps(DATASET)) == key(spaced) == key(DeltaRef.coerce(DATASET))
    assert key(DATASET) != key({**DATASET, "version": 4})


def test_the_request_parses_its_dataset_once_into_a_delta_ref():
    """Every later step reads ``request.ref``; a dataset no form can be read as fails on construction."""
    import json
    from types import MappingProxyType

    forms = [DATASET, json.dumps(DATASET), MappingProxyType(dict(DATASET)), DeltaRef.coerce(DATASET)]
    refs = {TrainingRequest("training_fns:keyless_train", form).ref for form in forms}
    assert refs == {DeltaRef("/nowhere/digits", 3)}
    with pytest.raises(InvalidSpecError, match=r"^dataset: expected a DeltaRef"):
        TrainingRequest("training_fns:keyless_train", "/nowhere/digits")
