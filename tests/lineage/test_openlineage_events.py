"""OpenLineage events of a real DAG run (``airflow dags test``, the provider's file transport):
ETL -> training -> registration -> scoring, each with its datasets and versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DAG_ID = "dltrain_openlineage_chain"
MODEL = "ol_digits"
DAY = "2026-11-25"

TRANSFORMS = """
def passthrough(spark, inputs, params):
    return inputs["raw"]
"""

DAG_FILE = """
from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.operators import (
    RegisterModelOperator,
    SparkBatchInferenceOperator,
    SparkToDeltaOperator,
    TrainModelOperator,
)

with DAG(dag_id={dag_id!r}, schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    landed = SparkToDeltaOperator(
        task_id="etl",
        table_uri={digits!r},
        partition={{"ds": {day!r}}},
        inputs={{"raw": {{"path": {raw!r}, "format": "parquet"}}}},
        transform="ol_transforms:passthrough",
    )
    trained = TrainModelOperator(
        task_id="train",
        dataset=landed.output,
        train_fn="airflow_provider_dltrain.demo.digits_model:train",
        hparams={{"epochs": 1, "batch_size": 64, "lr": 0.003, "seed": 3}},
        experiment_name={model!r},
        data_cutoff={day!r},
    )
    registered = RegisterModelOperator(
        task_id="register", train_result=trained.output, model_name={model!r}, metric="val_accuracy", mode="max"
    )
    scored = SparkBatchInferenceOperator(
        task_id="score",
        model={{"name": {model!r}, "alias": "champion"}},
        input=landed.output,
        table_uri={predictions!r},
        partition={{"ds": {day!r}}},
        scoring={{"feature_columns": ["features"], "key_columns": ["source_file", "label"]}},
    )
    landed >> trained >> registered >> scored
"""


def _write_raw(path: Path) -> None:
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from training_digits import digits_partition

    pq.write_table(digits_partition(0, 3), path)


@pytest.fixture(scope="module")
def chain(airflow_db, tmp_path_factory):
    """Run the four-task DAG once with OpenLineage on; the COMPLETE events by task id, and the paths."""
    tmp = tmp_path_factory.mktemp("openlineage")
    dags, raw, events = tmp / "dags", tmp / "raw.parquet", tmp / "events.jsonl"
    dags.mkdir()
    _write_raw(raw)
    paths = {"digits": str(tmp / "digits"), "predictions": str(tmp / "predictions"), "raw": str(raw)}
    (dags / "ol_transforms.py").write_text(TRANSFORMS)
    (dags / "ol_chain.py").write_text(DAG_FILE.format(dag_id=DAG_ID, day=DAY, model=MODEL, **paths))
    tracking_uri = f"sqlite:///{tmp / 'mlflow.db'}"
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "MLFLOW_TRACKING_URI": tracking_uri,
        "PYTHONPATH": os.pathsep.join([str(dags), os.environ.get("PYTHONPATH", "")]),
        # on only here: the suite's default is off (tests/conftest.py)
        "AIRFLOW__OPENLINEAGE__DISABLED": "false",
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "dltrain-tests",
        # the task runner waits this long for an event's emission, then drops it (default 10 s)
        "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "600",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}
        ),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, DAY],
        env=env,
        # not the checkout: ``python -m`` puts the working folder first on sys.path, and there an
        # ``airflow_provider_dltrain.egg-info`` left by an editable install (the support matrix's) is a
        # second copy of the provider's entry points, with which the task runner registered no
        # OpenLineage listener: the tasks emitted no event
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert events.exists(), (proc.stdout + proc.stderr)[-4000:]
    complete = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("eventType") == "COMPLETE" and event["job"]["name"].startswith(f"{DAG_ID}."):
            complete[event["job"]["name"].split(".", 1)[1]] = event
    missing = {"etl", "train", "register", "score"} - set(complete)
    assert not missing, f"no COMPLETE event for {sorted(missing)}:\n" + (proc.stdout + proc.stderr)[-6000:]
    return complete, paths, f"mlflow+{tracking_uri}"


def _datasets(event: dict, side: str) -> dict[tuple[str, str], str | None]:
    return {
        (d["namespace"], d["name"]): (d.get("facets", {}).get("version") or {}).get("datasetVersion")
        for d in event[side]
    }


@pytest.mark.slow
def test_etl_event_names_the_raw_input_and_the_delta_version_it_committed(chain):
    events, paths, _ = chain

    assert _datasets(events["etl"], "inputs") == {("file", paths["raw"]): None}
    assert _datasets(events["etl"], "outputs") == {("file", paths["digits"]): "0"}


@pytest.mark.slow
def test_training_event_reads_the_pinned_delta_version_and_outputs_the_logged_model(chain):
    events, paths, mlflow = chain
    (namespace, name), run_id = next(iter(_datasets(events["train"], "outputs").items()))

    assert _datasets(events["train"], "inputs") == {("file", paths["digits"]): "0"}
    assert namespace == mlflow and name.startswith("models:/") and run_id


@pytest.mark.slow
def test_registration_and_scoring_events_link_the_model_version_to_the_predictions(chain):
    events, paths, mlflow = chain
    trained = _datasets(events["train"], "outputs")

    assert _datasets(events["register"], "inputs") == {**trained, ("file", paths["digits"]): "0"}
    assert _datasets(events["register"], "outputs") == {(mlflow, f"models/{MODEL}"): "1"}
    assert _datasets(events["score"], "inputs") == {
        ("file", paths["digits"]): "0",
        (mlflow, f"models/{MODEL}"): "1",
    }
    assert _datasets(events["score"], "outputs") == {("file", paths["predictions"]): "0"}
