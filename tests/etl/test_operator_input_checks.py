"""Every operator refuses a bad date or partition value before any work starts.

A literal value fails while the DAG file is parsed (in ``__init__``); a templated one fails in
``execute`` once rendered, without retries, before Spark starts, a job is submitted or an MLflow run
opens. No Spark session is needed: the checks come first.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_dltrain.airflow_compat import AirflowFailException
from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidPartitionError, InvalidSpecError
from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator
from airflow_provider_dltrain.operators.registry import RegisterModelOperator
from airflow_provider_dltrain.operators.spark import DeltaWriteOptions, SparkToDeltaOperator
from airflow_provider_dltrain.operators.training import TrainModelOperator
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

BAD_PARTITION_VALUES = [
    "2026-11-28 junk",
    "2026-11-28 OR x",
    "2026-11-28:..",
    " 2026-11-28 ",
    "2026-11-28\n",
]
BAD_DATES = ["2026-11-28 junk", " 2026-11-28", "2026-11-28\n", "2026-02-30", "28/11/2026"]


class _TI:
    dag_id, run_id, task_id, try_number, map_index = "door", "manual__1", "t", 1, -1

    def xcom_push(self, key: str, value: Any) -> None:  # pragma: no cover - never reached here
        raise AssertionError("nothing may be pushed before the inputs are checked")


CONTEXT: dict[str, Any] = {"ti": _TI(), "run_id": "manual__1", "ds": "2026-11-28", "logical_date": None}


@pytest.fixture
def no_work(monkeypatch) -> list[str]:
    """Record any step that would start work: Spark, a stage, an engine, MLflow."""
    started: list[str] = []

    def forbid(name: str):
        def called(*args: Any, **kwargs: Any) -> Any:
            started.append(name)
            raise AssertionError(f"{name} started before the inputs were checked")

        return called

    monkeypatch.setattr("airflow_provider_dltrain.etl.spark.spark_session", forbid("spark"))
    monkeypatch.setattr("airflow_provider_dltrain.jobs.stages.run_stage", forbid("run_stage"))
    monkeypatch.setattr(
        "airflow_provider_dltrain.hooks.mlflow.MlflowHook.get_tracking_config", forbid("mlflow")
    )
    monkeypatch.setattr("airflow_provider_dltrain.training.runner.run_training", forbid("run_training"))
    monkeypatch.setattr(
        "airflow_provider_dltrain.training.runner.run_training_request", forbid("run_training_request")
    )
    return started


def _fails_in_execute(operator: Any, cause: type[Exception] = DltrainUserError) -> str:
    with pytest.raises(AirflowFailException) as caught:
        operator.execute(CONTEXT)
    assert isinstance(caught.value.__cause__, cause)
    return str(caught.value)


def _etl(tmp_path, **kwargs: Any) -> SparkToDeltaOperator:
    kwargs.setdefault("partition", {"ds": "2026-11-28"})
    return SparkToDeltaOperator(
        task_id="etl", table_uri=str(tmp_path / "events"), transform="m:f", inputs={}, **kwargs
    )


# -- SparkToDeltaOperator --------------------------------------------------------------------------
@pytest.mark.parametrize("value", BAD_PARTITION_VALUES)
def test_etl_refuses_a_literal_bad_partition_value_when_the_dag_is_parsed(value, tmp_path):
    with pytest.raises(InvalidPartitionError) as err:
        _etl(tmp_path, partition={"ds": value})
    assert "partition['ds']" in str(err.value) and repr(value) in str(err.value)
    assert not (tmp_path / "events").exists()


@pytest.mark.parametrize("value", BAD_PARTITION_VALUES)
def test_etl_refuses_a_rendered_bad_partition_value_before_spark_starts(value, tmp_path, no_work):
    operator = _etl(tmp_path, partition={"ds": "{{ ds }}"})
    operator.partition = {"ds": value}  # what rendering the template gave

    message = _fails_in_execute(operator, InvalidPartitionError)

    assert repr(value) in message
    assert no_work == [] and not (tmp_path / "events").exists()


def test_etl_checks_the_partition_after_templates_are_rendered(tmp_path, no_work):
    operator = _etl(tmp_path, partition={"ds": "{{ ds }} junk"})  # not checked while parsing
    operator.render_template_fields(CONTEXT)  # type: ignore[arg-type]

    assert "'2026-11-28 junk'" in _fails_in_execute(operator, InvalidPartitionError)
    assert no_work == []


@pytest.mark.parametrize("value", ["2026-02-30", "2026-11-28T00", "20261128"])
def test_etl_refuses_a_value_not_matching_the_declared_date_format(value, tmp_path, no_work):
    write = DeltaWriteOptions(partition_formats={"ds": "date"})
    with pytest.raises(InvalidPartitionError, match=r"'date' \(YYYY-MM-DD"):
        _etl(tmp_path, partition={"ds": value}, write=write)
    operator = _etl(tmp_path, partition={"ds": "{{ ds }}"}, write=write)
    operator.partition = {"ds": value}
    assert "does not match the format declared for column 'ds'" in _fails_in_execute(operator)
    assert no_work == []


def test_etl_refuses_an_unusable_partition_format_when_the_dag_is_parsed(tmp_path):
    with pytest.raises(InvalidSpecError, match="not a valid regular expression"):
        _etl(tmp_path, write={"partition_formats": {"ds": "[0-9"}})


def test_etl_accepts_a_date_partition_with_a_declared_format(tmp_path):
    operator = _etl(tmp_path, write=DeltaWriteOptions(partition_formats={"ds": "date"}))
    spec = operator.run_spec(CONTEXT)  # type: ignore[arg-type]
    assert spec.partition == {"ds": "2026-11-28"}
    assert spec.params["write"]["partition_formats"] == {"ds": "date"}


# -- SparkBatchInferenceOperator -------------------------------------------------------------------
def _score(**kwargs: Any) -> SparkBatchInferenceOperator:
    kwargs.setdefault("partition", {"ds": "2026-11-28"})
    kwargs.setdefault("model", {"name": "digits", "champion_as_of": "2026-11-28"})
    kwargs.setdefault("scoring", {"feature_columns": ["features"], "partition_formats": {"ds": "date"}})
    return SparkBatchInferenceOperator(
        task_id="score", input={"uri": "/in", "version": 0}, table_uri="/out", **kwargs
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        *({"partition": {"ds": value}} for value in BAD_PARTITION_VALUES),
        {"partition": {"ds": "2026-02-30"}},
        *({"model_as_of": value} for value in BAD_DATES),
        *({"model": {"name": "digits", "champion_as_of": value}} for value in BAD_DATES),
    ],
)
def test_scoring_refuses_a_bad_date_or_partition_value_literal_or_rendered(kwargs, no_work):
    with pytest.raises(DltrainUserError):
        _score(**kwargs)
    templated = {
        "partition": {"ds": "{{ ds }}"},
        "model": {"name": "digits", "champion_as_of": "{{ ds }}"},
        "model_as_of": "{{ ds }}",
    }
    operator = _score(**templated)
    for name, value in kwargs.items():
        setattr(operator, name, value)  # what rendering the templates gave
    _fails_in_execute(operator)
    assert no_work == []


# -- TrainModelOperator and RegisterModelOperator --------------------------------------------------
@pytest.mark.parametrize("value", BAD_DATES)
def test_training_refuses_a_bad_data_cutoff_before_any_mlflow_run(value, no_work):
    with pytest.raises(InvalidSpecError, match=r"^data_cutoff="):
        TrainModelOperator(
            task_id="train", dataset={"uri": "/t", "version": 0}, train_fn="m:f", data_cutoff=value
        )
    operator = TrainModelOperator(
        task_id="train", dataset={"uri": "/t", "version": 0}, train_fn="m:f", data_cutoff="{{ ds }}"
    )
    operator.data_cutoff = value

    assert "data_cutoff=" in _fails_in_execute(operator, InvalidSpecError)
    assert no_work == []


def test_run_training_refuses_a_bad_cutoff_before_the_mlflow_run_opens(tmp_path):
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.runner import run_training

    store = tmp_path / "mlflow.db"
    with pytest.raises(InvalidSpecError, match=r"^cutoff="):
        run_training(
            "training_fns:failing_train",
            {"uri": str(tmp_path / "missing"), "version": 0},
            tracking=TrackingConfig(tracking_uri=f"sqlite:///{store}"),
            cutoff="2026-11-28 junk",
        )
    assert not store.exists()


@pytest.mark.parametrize("value", BAD_DATES)
def test_registration_refuses_a_bad_data_cutoff_literal_or_rendered(value, no_work):
    result = {"model_uri": "runs:/x/model", "metrics": {"loss": 1.0}}
    with pytest.raises(InvalidSpecError, match=r"^data_cutoff="):
        RegisterModelOperator(
            task_id="register", train_result=result, model_name="m", metric="loss", data_cutoff=value
        )
    operator = RegisterModelOperator(
        task_id="register", train_result=result, model_name="m", metric="loss", data_cutoff="{{ ds }}"
    )
    operator.data_cutoff = value

    assert "data_cutoff=" in _fails_in_execute(operator, InvalidSpecError)
    assert no_work == []


# -- DeltaTableVersionSensor -----------------------------------------------------------------------
@pytest.mark.parametrize("value", BAD_PARTITION_VALUES)
def test_sensor_refuses_a_literal_bad_partition_value_when_the_dag_is_parsed(value, tmp_path):
    with pytest.raises(InvalidPartitionError):
        DeltaTableVersionSensor(task_id="wait", table_uri=str(tmp_path / "t"), partition={"ds": value})
    DeltaTableVersionSensor(task_id="wait", table_uri=str(tmp_path / "t"), partition={"ds": "{{ ds }}"})
