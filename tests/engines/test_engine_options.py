"""Where work runs, said once: one placement table, one options object per place, checked at parse."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re

import pytest

import airflow_provider_dltrain
from airflow_provider_dltrain.engines import ENGINE_NAMES, TRAINING_ENGINE_NAMES, Options, options_class
from airflow_provider_dltrain.engines.placement import PLACES, STAGE, TRAINING
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.training.backends import backend_options_class

ADAPTERS = [name for name, place in PLACES.items() if place.remote]
IN_PROCESS = [name for name, place in PLACES.items() if not place.remote and place.options is not None]


def test_the_lists_users_see_are_the_placement_table():
    assert tuple(n for n, p in PLACES.items() if STAGE in p.runs) == ENGINE_NAMES
    assert tuple(n for n, p in PLACES.items() if TRAINING in p.runs and p.remote) == TRAINING_ENGINE_NAMES
    assert "ec2" in ENGINE_NAMES and "ec2" in TRAINING_ENGINE_NAMES  # one adapter, both words
    assert {"local", "ddp", "torch_distributor", "horovod"} <= {
        n for n, p in PLACES.items() if TRAINING in p.runs
    }


@pytest.mark.parametrize("name", ADAPTERS + IN_PROCESS)
def test_each_option_is_written_once_in_a_frozen_options_class_with_its_docstring_line(name):
    cls = options_class(name) if name in ADAPTERS else backend_options_class(name)
    assert issubclass(cls, Options) and cls.__dataclass_params__.frozen
    documented = re.findall(r":param (\w+):", cls.__doc__ or "")
    assert documented == [f.name for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("name", ADAPTERS)
def test_each_adapter_takes_its_clients_and_its_options_object_only(name):
    factory = PLACES[name].factory_of()
    params = [p for p in inspect.signature(factory).parameters if p != "self"]
    assert params == ["clients", "options"]
    assert "options" in (factory.__doc__ or "") or factory.__name__.replace("Engine", "Options") in (
        factory.__doc__ or ""
    )


def test_no_constructor_outside_the_airflow_operators_takes_more_than_ten_parameters():
    root = pathlib.Path(airflow_provider_dltrain.__file__).parent
    wide = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or path.parent.name == "operators":
                continue
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    a = fn.args
                    count = len(a.posonlyargs + a.args + a.kwonlyargs) - 1 + bool(a.vararg) + bool(a.kwarg)
                    if count > 10:
                        wide.append(f"{path.relative_to(root)}:{node.name} ({count})")
    assert wide == []


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("ec2", {"staging_uri": "s3://b/s", "launcher": "mpirun"}, "ec2 launcher must be one of"),
        ("ec2", {"staging_uri": "/local/dir"}, "ec2 staging_uri must be an s3:// prefix"),
        ("sagemaker", {"staging_uri": "s3://b/s", "role": "R"}, "role must be the job's execution role ARN"),
        ("kubeflow", {"staging_uri": "s3://b/s", "image": "i", "num_nodes": 0}, "num_nodes must be >= 1"),
        ("kubeflow", {"staging_uri": "", "image": "i"}, "staging_uri is required"),
        (
            "glue",
            {"staging_uri": "s3://b", "role": "R", "number_of_workers": 1},
            "number_of_workers must be >= 2",
        ),
    ],
)
def test_a_bad_value_fails_when_the_options_object_is_built_naming_the_option(name, options, message):
    with pytest.raises(InvalidSpecError, match=message):
        options_class(name).of(options)


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


def test_a_bad_value_fails_when_the_dag_is_defined_and_the_operator_keeps_the_typed_object():
    from airflow_provider_dltrain.engines.glue import GlueOptions
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    kwargs = {"task_id": "t", "table_uri": "/tmp/t", "partition": {"ds": "{{ ds }}"}, "transform": "m:f"}
    with pytest.raises(InvalidSpecError, match="glue needs engine option 'role'"):
        SparkToDeltaOperator(engine="glue", engine_options={"staging_uri": "s3://b"}, **kwargs)
    given = SparkToDeltaOperator(
        engine="glue", engine_options={"staging_uri": "s3://b", "role": "R"}, **kwargs
    )
    assert given.engine_options == GlueOptions(staging_uri="s3://b", role="R")
    typed = SparkToDeltaOperator(
        engine="glue", engine_options=GlueOptions(staging_uri="s3://b", role="R"), **kwargs
    )
    assert typed.engine_options.role == "R" and typed.engine_options.number_of_workers == 2


def test_templated_options_keep_their_form_names_checked_now_values_when_rendered():
    from airflow_provider_dltrain.engines import get_engine
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    kwargs = {"task_id": "t", "table_uri": "/tmp/t", "partition": {"ds": "{{ ds }}"}, "transform": "m:f"}
    text = SparkToDeltaOperator(engine="glue", engine_options="{{ var.json.glue }}", **kwargs)
    assert text.engine_options == "{{ var.json.glue }}"
    mapping = {"staging_uri": "{{ var.value.staging }}", "role": "R"}
    assert SparkToDeltaOperator(engine="glue", engine_options=mapping, **kwargs).engine_options == mapping
    with pytest.raises(InvalidSpecError, match="unknown engine option 'rol' for engine 'glue'"):
        SparkToDeltaOperator(engine="glue", engine_options={"staging_uri": "{{ x }}", "rol": "R"}, **kwargs)
    # once rendered, the values are checked where the engine is built
    with pytest.raises(InvalidSpecError, match="number_of_workers must be >= 2"):
        get_engine(
            "glue", lambda service: object(), {"staging_uri": "/tmp/s", "role": "R", "number_of_workers": 0}
        )


def test_a_misspelt_or_bad_backend_option_fails_when_the_dag_is_defined():
    from airflow_provider_dltrain.operators.training import TrainModelOperator
    from airflow_provider_dltrain.training.forked import DdpOptions

    kwargs = {"task_id": "t", "dataset": "/tmp/d", "train_fn": "m:f"}
    with pytest.raises(
        InvalidSpecError,
        match=r"unknown backend option 'num_proceses' for backend 'ddp'; valid: num_processes$",
    ):
        TrainModelOperator(backend="ddp", backend_options={"num_proceses": 2}, **kwargs)
    with pytest.raises(InvalidSpecError, match="num_processes must be >= 1, got 0"):
        TrainModelOperator(backend="ddp", backend_options={"num_processes": 0}, **kwargs)
    with pytest.raises(
        InvalidSpecError, match=r"unknown backend option 'instance' for backend 'sagemaker'; valid: "
    ):
        TrainModelOperator(backend="sagemaker", backend_options={"instance": 2}, **kwargs)
    assert TrainModelOperator(
        backend="ddp", backend_options={"num_processes": 3}, **kwargs
    ).backend_options == (DdpOptions(num_processes=3))


# each engine's page in docs/engines: its options table names exactly its options class's fields
PAGES = {
    "glue": "glue",
    "emr": "emr",
    "emr-serverless": "emr_serverless",
    "sagemaker-processing": "sagemaker_processing",
    "spark-submit": "spark_submit",
    "sagemaker": "sagemaker",
    "ec2": "ec2",
    "ray": "ray",
    "kubeflow": "kubeflow",
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_each_engine_page_documents_exactly_the_options_its_class_takes(page):
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "engines" / f"{page}.md").read_text()
    first_cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    documented = {name for cell in first_cells for name in re.findall(r"`([a-z_]+)`", cell)}
    assert documented == {f.name for f in dataclasses.fields(options_class(PAGES[page]))}
    assert set(PAGES.values()) == set(ADAPTERS)
