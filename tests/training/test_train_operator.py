"""``TrainModelOperator``: the same training function through Airflow (``airflow dags test``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from training_digits import DAYS

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.operators.training import MlflowRunLink, TrainModelOperator, mlflow_run_url
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.backends import TorchDistributorOptions

HERE = Path(__file__).resolve().parent
DAG_ID = "dltrain_train_operator_test"

DAG_FILE = """
from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.operators.training import TrainModelOperator

with DAG(
    dag_id={dag_id!r},
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
):
    trained = TrainModelOperator(
        task_id="train",
        dataset={dataset!r},
        train_fn="training_fns:traced_demo_train",
        hparams={{"epochs": 2, "batch_size": 64, "seed": 3}},
        data_filter=[["ds", "<=", "{{{{ data_interval_start | ds }}}}"]],
        backend={backend!r},
        backend_options={backend_options!r},
        experiment_name="operator-tests",
    )

    @task
    def record(result):
        with open({out!r}, "w") as handle:
            json.dump(result, handle)

    record(trained.output)
"""


def _run_dag(
    tmp_path: Path, dataset: dict, tracking_uri: str, backend: str, backend_options: dict, date: str
):
    dags = tmp_path / "dags"
    dags.mkdir()
    out = tmp_path / "result.json"
    (dags / "train_dag.py").write_text(
        DAG_FILE.format(
            dag_id=DAG_ID, dataset=dataset, backend=backend, backend_options=backend_options, out=str(out)
        )
    )
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "MLFLOW_TRACKING_URI": tracking_uri,  # no mlflow_default connection: the hook falls back to this
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, date],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = proc.stdout + proc.stderr
    return proc.returncode, output, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.slow
def test_airflow_dags_test_trains_the_same_function_and_tags_the_run_with_the_dag_run(
    airflow_db, digits_ref, tmp_path
):
    tracking = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    # A manual run of 2026-11-28 on a data-interval timetable covers [11-27, 11-28): cut-off 11-27.
    code, output, result = _run_dag(
        tmp_path,
        digits_ref.to_dict(),
        tracking.tracking_uri,
        "torch_distributor",
        {"num_processes": 2},
        DAYS[3],
    )
    assert code == 0, output[-6000:]
    assert result is not None, output[-3000:]
    assert result["dataset"] == digits_ref.to_dict() and result["model_uri"].startswith("models:/")
    assert set(result["metrics"]) == {"train_loss", "val_loss", "val_accuracy"}
    assert result["params"] == {"epochs": 2, "batch_size": 64, "seed": 3}

    run = tracking.client().get_run(result["run_id"])
    tags = run.data.tags
    assert tags["dltrain.dag_id"] == DAG_ID and tags["dltrain.run_id"].startswith("manual__")
    assert tags["dltrain.logical_date"].startswith(DAYS[3])
    assert tags["dltrain.data_cutoff"] == DAYS[2]
    assert json.loads(tags["dltrain.data_filter"]) == [[["ds", "<=", DAYS[2]]]]
    assert run.info.status == "FINISHED" and tags["dltrain.world_size"] == "2"
    assert "epoch 1/2 train_loss=" in output  # progress per epoch in the task log
    assert "Failed to push an xcom for task operator extra link" not in output


class _TI:
    def __init__(self) -> None:
        self.dag_id, self.task_id, self.run_id, self.try_number = "d", "train", "manual__x", 1
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def test_deterministic_errors_fail_the_task_without_retries(digits_ref, monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    context = {"ti": _TI(), "logical_date": None}
    bad_filter = TrainModelOperator(
        task_id="t1",
        dataset=digits_ref.to_dict(),
        train_fn="training_fns:traced_demo_train",
        data_filter=[["x", "=", 1]],
    )
    with pytest.raises(AirflowFailException, match="column 'x'"):
        bad_filter.execute(context)  # type: ignore[arg-type]
    user_error = TrainModelOperator(
        task_id="t2",
        dataset=digits_ref.to_dict(),
        train_fn="training_fns:failing_train",
        hparams={"user_error": True},
    )
    with pytest.raises(AirflowFailException, match="row 7"):
        user_error.execute(context)  # type: ignore[arg-type]
    with pytest.raises(AirflowFailException, match="DeltaRef"):
        TrainModelOperator(task_id="t3", dataset="latest", train_fn=print).execute(context)  # type: ignore[arg-type]


def test_operator_templates_its_inputs_and_composes_the_backend():
    op = TrainModelOperator(
        task_id="t",
        dataset="{{ ti.xcom_pull('ingest') }}",
        train_fn="airflow_provider_dltrain.demo.digits_model:train",
        backend="torch_distributor",
        backend_options={"num_processes": 2},
    )
    assert {"dataset", "hparams", "data_filter", "data_cutoff", "experiment_name", "code_version"} <= set(
        op.template_fields
    )
    assert any(isinstance(link, MlflowRunLink) for link in op.operator_extra_links)
    assert (
        op.backend_options == TorchDistributorOptions(num_processes=2)
        and op.mlflow_conn_id == "mlflow_default"
    )


def test_mlflow_run_link_points_at_the_server_run_page_without_credentials():
    url = mlflow_run_url("https://bob:s3cret@mlflow.internal:5000/prefix/", "7", "abc")
    assert url == "https://mlflow.internal:5000/prefix/#/experiments/7/runs/abc"
    assert mlflow_run_url("sqlite:////tmp/mlflow.db", "7", "abc") == ""


def test_importing_the_operator_module_loads_no_heavy_engine():
    code = (
        "import sys; import airflow_provider_dltrain.operators.training as m; "
        "print(sorted(x for x in ('torch','mlflow','pyspark','deltalake') if x in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_unknown_backend_options_are_a_spec_error():
    from airflow_provider_dltrain.training import get_backend

    with pytest.raises(InvalidSpecError, match="num_procs"):
        get_backend("torch_distributor", {"num_procs": 2})


def test_training_is_skipped_only_when_the_champion_for_the_cutoff_had_the_same_data_code_and_params(
    digits_ref, monkeypatch, tmp_path
):
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_provider_dltrain.registry import GateSpec, register_and_promote

    tracking = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.tracking_uri)
    context = {"ti": _TI(), "logical_date": None}
    kwargs = {
        "dataset": digits_ref.to_dict(),
        "train_fn": "training_fns:traced_demo_train",
        "hparams": '{"epochs": 1, "batch_size": 64}',  # as "{{ params.hparams | tojson }}" renders
        "data_filter": [["ds", "<=", DAYS[2]]],
        "backend_options": {"num_threads": 1},
        "skip_if_unchanged": "digits",
    }
    first = TrainModelOperator(task_id="a", **kwargs).execute(context)  # type: ignore[arg-type]
    register_and_promote(
        tracking,
        model_name="digits",
        model_uri=first["model_uri"],
        run_id=first["run_id"],
        metrics=first["metrics"],
        gate=GateSpec("val_accuracy", "max"),
    )
    with pytest.raises(AirflowSkipException, match="unchanged since digits v1"):
        TrainModelOperator(task_id="b", **kwargs).execute(context)  # type: ignore[arg-type]

    def reason(**changes):
        op = TrainModelOperator(task_id="c", **{**kwargs, **changes})
        return op._unchanged(tracking, digits_ref, json.loads(op.hparams), None)

    assert reason() is not None
    assert reason(hparams='{"epochs": 1, "batch_size": 32}') is None  # new hyper-parameters
    assert reason(data_filter=[["ds", "<=", DAYS[3]]]) is None  # a later cut-off reads a new day's files
    assert reason(train_fn="training_fns:failing_train") is None  # other code
    assert reason(code_version="v2") is None  # a named code version instead of the source hash
