"""A pickled champion is refused before any Spark worker loads it, unless ``allow_pickle=True``.

Model ``guarded`` in the shared store: v1 (pt2) gated champion from 2026-11-20, v2 (pickle format,
its class writes a marker file when unpickled) gated champion from 2026-11-26.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from inference_helpers import DAYS, N_CLASSES, N_FEATURES, ROWS_PER_DAY, features

from airflow_provider_dltrain.exceptions import UnsafeModelError
from airflow_provider_dltrain.inference import ScoringSpec, resolve_scoring_model, score_table
from airflow_provider_dltrain.lake import DeltaLog, open_table

NAME = "guarded"
SCORING = ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=1_000)
DAY, DAY_FILTER = {"ds": DAYS[1]}, [["ds", "=", DAYS[1]]]
PICKLED_DAY, PT2_DAY = "2026-11-27", "2026-11-22"


@pytest.fixture(scope="module")
def guarded(store, tmp_path_factory) -> SimpleNamespace:
    import mlflow
    import mlflow.pytorch
    import torch
    from marker_model import MarkerMLP

    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote

    marker = tmp_path_factory.mktemp("pickle-marker") / "unpickled.txt"
    store.tracking.apply()
    from airflow_provider_dltrain.store.config import ensure_experiment

    client = mlflow.MlflowClient()
    mlflow.set_experiment(
        experiment_id=ensure_experiment(client, "inference-tests", store.tracking.tracking_uri)
    )
    torch.manual_seed(7)
    safe = torch.nn.Sequential(torch.nn.Linear(N_FEATURES, N_CLASSES)).eval()
    with mlflow.start_run():
        mlflow.log_metric("val_loss", 0.5)
        mlflow.pytorch.log_model(
            safe,
            name="model",
            input_example=features(4, 0),
            registered_model_name=NAME,
            serialization_format="pt2",
            pip_requirements=["torch"],
        )
    with mlflow.start_run():
        mlflow.log_metric("val_loss", 0.4)
        mlflow.pytorch.log_model(
            MarkerMLP(N_FEATURES, N_CLASSES, str(marker)).eval(),
            name="model",
            registered_model_name=NAME,
            serialization_format="pickle",
            code_paths=[str(Path(__file__).with_name("marker_model.py"))],
            pip_requirements=["torch"],
        )
    for version, cutoff in ((1, "2026-11-20"), (2, "2026-11-26")):
        outcome = gate_and_promote(
            store.tracking, model_name=NAME, version=version, gate=GateSpec("val_loss"), data_cutoff=cutoff
        )
        assert outcome.promoted, outcome
    assert not marker.exists(), "registering and gating on recorded metrics must not load the model"
    return SimpleNamespace(tracking=store.tracking, marker=marker)


def _score(spark, guarded, input_table, out, as_of, **kwargs):
    chosen = resolve_scoring_model({"name": NAME, "champion_as_of": as_of}, guarded.tracking)
    return score_table(
        spark,
        chosen,
        input_table,
        out,
        DAY,
        scoring=SCORING,
        tracking=guarded.tracking,
        input_filter=DAY_FILTER,
        **kwargs,
    )


def test_pickled_champion_is_refused_before_any_worker_loads_it(spark, guarded, input_table, tmp_path):
    out = str(tmp_path / "scores")
    with pytest.raises(UnsafeModelError) as err:
        _score(spark, guarded, input_table, out, PICKLED_DAY)
    text = str(err.value)
    assert "model 'guarded' version 2 (models:/guarded/2)" in text
    assert "pickle format" in text and "serialization_format='pt2'" in text and "allow_pickle=True" in text
    assert not guarded.marker.exists()
    assert DeltaLog(out).latest_version() is None


def test_a_worker_refuses_it_too_when_the_driver_check_is_bypassed(guarded):
    from airflow_provider_dltrain.inference.worker import WORKER_ERROR_MARK, WorkerConfig, load_model

    cfg = WorkerConfig(
        model_uri="models:/guarded/2",
        tracking_uri=guarded.tracking.tracking_uri,
        registry_uri=None,
        task="classification",
        feature_columns=("features",),
    )
    with pytest.raises(UnsafeModelError, match=f"^{WORKER_ERROR_MARK} model models:/guarded/2 .*pickle"):
        load_model(cfg)
    assert not guarded.marker.exists()


def test_operator_fails_without_retry_and_says_what_to_do(guarded, input_table, monkeypatch, tmp_path):
    import json

    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    conn = {"conn_type": "mlflow", "host": guarded.tracking.tracking_uri}
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_GUARDED", json.dumps(conn))
    out = str(tmp_path / "scores")
    op = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": NAME, "alias": "champion"},
        input=input_table.to_dict(),
        table_uri=out,
        partition=DAY,
        scoring=SCORING,
        mlflow_conn_id="mlflow_guarded",
    )
    ti = SimpleNamespace(dag_id="nightly", run_id="manual__1", task_id="score", try_number=1)
    with pytest.raises(AirflowFailException, match=r"UnsafeModelError: model 'guarded' version 2 .*pt2"):
        op.execute({"ti": ti, "run_id": "manual__1"})  # type: ignore[arg-type]
    assert not guarded.marker.exists()
    assert DeltaLog(out).latest_version() is None


def test_with_allow_pickle_it_loads_in_the_workers_and_a_warning_is_logged(
    spark, guarded, input_table, tmp_path, caplog
):
    out = str(tmp_path / "scores")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.store.loading"):
        _score(spark, guarded, input_table, out, PICKLED_DAY, allow_pickle=True)
    pids = {line.split()[-1] for line in guarded.marker.read_text().splitlines()}
    assert pids and str(os.getpid()) not in pids, "loaded by Spark Python workers, never by the driver"
    assert "allow_pickle=True" in caplog.text and "model 'guarded' version 2" in caplog.text
    table = open_table(out).to_pyarrow_table()
    assert table.num_rows == ROWS_PER_DAY and set(table.column("model_version").to_pylist()) == {2}


def test_the_pt2_version_of_the_same_model_still_scores(spark, guarded, input_table, tmp_path, caplog):
    out = str(tmp_path / "scores")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_dltrain.store.loading"):
        _score(spark, guarded, input_table, out, PT2_DAY)
    table = open_table(out).to_pyarrow_table()
    assert table.num_rows == ROWS_PER_DAY and set(table.column("model_version").to_pylist()) == {1}
    assert "allow_pickle" not in caplog.text
