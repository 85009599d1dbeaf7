"""SparkBatchInferenceOperator: templated sync path, Asset event, commit metadata, fail-fast errors."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from inference_helpers import DAYS, ROWS_PER_DAY

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake import DeltaLog, open_table

SCORING = {"feature_columns": ["features"], "key_columns": ["id"], "batch_size": 1000}


@pytest.fixture
def mlflow_conn(monkeypatch, store) -> str:
    """An Airflow ``mlflow`` connection to the test store, defined through the environment."""
    conn = {"conn_type": "mlflow", "host": store.tracking.tracking_uri}
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_INFERENCE", json.dumps(conn))
    return "mlflow_inference"


def _context(day: str = DAYS[1]):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    ti = SimpleNamespace(dag_id="nightly", run_id=f"scheduled__{day}", task_id="score", try_number=1)
    return {
        "ds": day,
        "ti": ti,
        "logical_date": start,
        "data_interval_start": start,
        "data_interval_end": start,
        "outlet_events": OutletEventAccessors(),
    }


def _operator(**kwargs):
    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    kwargs.setdefault("scoring", SCORING)
    kwargs.setdefault("partition", {"ds": "{{ ds }}"})
    kwargs.setdefault("input_filter", [["ds", "=", "{{ ds }}"]])
    return SparkBatchInferenceOperator(task_id="score", **kwargs)


def _run(op, context):
    op.render_template_fields(context)
    return op.execute(context)


def test_operator_scores_templated_partition_with_champion_of_its_day_and_emits_asset_event(
    spark, promoted, input_table, mlflow_conn, tmp_path
):
    from airflow.sdk import Asset

    out = str(tmp_path / "scores")
    asset = Asset(name="scores", uri=f"file://{out}")
    op = _operator(
        model={"name": "digits", "alias": "champion"},
        model_as_of="{{ ds }}",
        input=input_table.to_dict(),
        table_uri=out,
        mlflow_conn_id=mlflow_conn,
        outlets=[asset],
    )
    context = _context("2026-11-28")  # v2 has been champion since 2026-11-25
    result = _run(op, context)

    assert result == {**DeltaLog(out).ref(result["version"]).to_dict(), "committed": True}
    table = open_table(out).to_pyarrow_table()
    assert table.num_rows == ROWS_PER_DAY and set(table.column("model_version").to_pylist()) == {2}
    assert set(table.column("ds").to_pylist()) == {"2026-11-28"}
    extra = context["outlet_events"][asset].extra
    assert extra["version"] == result["version"] and extra["partition"] == {"ds": "2026-11-28"}
    assert (extra["model_name"], extra["model_version"]) == ("digits", 2)
    info = DeltaLog(out).commit_info(result["version"])
    assert info["airflow.dag_id"] == "nightly" and info["airflow.run_id"] == "scheduled__2026-11-28"
    assert info["dltrain.model_version"] == "2"
    assert json.dumps(result)  # XCom-safe


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (["digits"], r"model must be a model URI or a dict"),
        ({"alias": "champion"}, r"model needs a non-empty 'name'"),
        ({"name": "digits", "version": 99}, r"model: .*digits"),
    ],
)
def test_bad_model_spec_fails_fast_naming_the_field(
    store, input_table, mlflow_conn, tmp_path, model, message
):
    from airflow.sdk.exceptions import AirflowFailException

    out = str(tmp_path / "o")
    op = _operator(model=model, input=input_table.to_dict(), table_uri=out, mlflow_conn_id=mlflow_conn)
    with pytest.raises(AirflowFailException, match=message):
        _run(op, _context())
    assert DeltaLog(out).latest_version() is None


def test_input_that_is_not_a_delta_ref_fails_fast_naming_the_field(store, mlflow_conn, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    op = _operator(
        model="models:/digits/1",
        input={"uri": "/lake/x"},
        table_uri=str(tmp_path / "o"),
        mlflow_conn_id=mlflow_conn,
    )
    with pytest.raises(AirflowFailException, match=r"^InvalidSpecError: input: .*version"):
        _run(op, _context())


def test_bad_scoring_spec_or_engine_fails_when_the_dag_is_parsed(input_table):
    with pytest.raises(InvalidSpecError, match="feature_columns"):
        _operator(model="models:/d/1", input=input_table.to_dict(), table_uri="/t", scoring={})
    with pytest.raises(ValueError, match="engine"):
        _operator(model="models:/d/1", input=input_table.to_dict(), table_uri="/t", engine="dataproc")


def test_dag_parsing_the_operator_imports_no_spark_torch_mlflow_or_deltalake():
    code = (
        "import sys\n"
        "from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator as Op\n"
        "Op(task_id='t', model='models:/d/1', input={'uri': '/x', 'version': 0}, table_uri='/y',"
        " partition={'ds': '{{ ds }}'}, scoring={'feature_columns': ['f']})\n"
        "heavy = ('torch', 'mlflow', 'pyspark', 'deltalake', 'pandas')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=90)
    assert out.stdout.strip().splitlines()[-1] == "[]"
