"""Typed engine and backend options: one frozen dataclass per engine and backend, checked at parse."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from airflow_provider_dltrain.engines import ENGINE_NAMES, TRAINING_ENGINE_NAMES, _factories, options_class
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.training.backends import _BUILT_IN, backend_options_class

ADAPTERS = [n for n in ENGINE_NAMES if n != "local"] + list(TRAINING_ENGINE_NAMES)


def _keywords(factory) -> dict[str, object]:
    params = inspect.signature(factory).parameters.values()
    return {p.name: p.default for p in params if p.name not in ("self", "clients")}


@pytest.mark.parametrize("name", ADAPTERS)
def test_each_engines_options_dataclass_has_exactly_its_constructors_keywords_and_defaults(name):
    cls = options_class(name)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    expected = {
        k: (dataclasses.MISSING if d is inspect.Parameter.empty else d)
        for k, d in _keywords(_factories()[name]).items()
    }
    assert fields == expected
    assert cls.__dataclass_params__.frozen


@pytest.mark.parametrize("name", sorted(_BUILT_IN))
def test_each_backends_options_dataclass_has_exactly_its_constructors_keywords(name):
    fields = {f.name: f.default for f in dataclasses.fields(backend_options_class(name))}
    expected = {
        k: (dataclasses.MISSING if d is inspect.Parameter.empty else d)
        for k, d in _keywords(_BUILT_IN[name]).items()
    }
    assert fields == expected


def test_a_misspelt_engine_option_fails_when_the_dag_is_defined_naming_it_and_the_valid_ones():
    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    with pytest.raises(InvalidSpecError) as err:
        SparkBatchInferenceOperator(
            task_id="score",
            model={"name": "m", "alias": "champion"},
            input="/tmp/in",
            table_uri="/tmp/out",
            partition={"ds": "2026-01-01"},
            scoring={"feature_columns": ["x"]},
            engine="emr_serverless",
            engine_options={"staging_uri": "s3://b/s", "aplication_id": "app"},
        )
    assert str(err.value).startswith(
        "unknown engine option 'aplication_id' for engine 'emr_serverless'; valid: application_id, "
    )


def test_templated_engine_options_and_an_options_dataclass_are_taken_as_they_are():
    from airflow_provider_dltrain.engines.glue import GlueOptions
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    kwargs = {"task_id": "t", "table_uri": "/tmp/t", "partition": {"ds": "{{ ds }}"}, "transform": "m:f"}
    templated = SparkToDeltaOperator(engine="glue", engine_options="{{ var.json.glue }}", **kwargs)
    assert templated.engine_options == "{{ var.json.glue }}"
    typed = SparkToDeltaOperator(
        engine="glue", engine_options=GlueOptions(staging_uri="s3://b", role="R"), **kwargs
    )
    assert typed.engine_options["role"] == "R" and typed.engine_options["number_of_workers"] == 2


def test_a_misspelt_backend_option_fails_when_the_dag_is_defined():
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    with pytest.raises(
        InvalidSpecError,
        match=r"unknown backend option 'num_proceses' for backend 'ddp'; valid: num_processes$",
    ):
        TrainModelOperator(
            task_id="t", dataset="/tmp/d", train_fn="m:f", backend="ddp", backend_options={"num_proceses": 2}
        )
    with pytest.raises(
        InvalidSpecError, match=r"unknown backend option 'instance' for backend 'sagemaker'; valid: "
    ):
        TrainModelOperator(
            task_id="t",
            dataset="/tmp/d",
            train_fn="m:f",
            backend="sagemaker",
            backend_options={"instance": 2},
        )
