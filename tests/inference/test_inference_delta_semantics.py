"""Scoring reads the input version as Delta defines it, and checks input_filter before anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from inference_helpers import arrow_rows, features

from airflow_provider_dltrain.inference import ScoringSpec, resolve_scoring_model, score_table
from airflow_provider_dltrain.lake import latest, open_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from deletion_vectors import delete_with_deletion_vector

SCORING = ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=1_000)


def test_a_row_dropped_by_a_deletion_vector_is_not_scored(spark, store, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = str(tmp_path / "input")
    data = arrow_rows(features(6, 3), 0)
    data = data.append_column("ds", pa.array(["2026-11-28"] * 6))
    write_deltalake(uri, data, partition_by=["ds"], configuration={"delta.enableDeletionVectors": "true"})
    delete_with_deletion_vector(uri, {"ds": "2026-11-28"}, [3])  # id 3
    chosen = resolve_scoring_model("models:/digits/1", store.tracking)
    out = str(tmp_path / "scores")
    score_table(
        spark,
        chosen,
        latest(uri),
        out,
        {"ds": "2026-11-28"},
        scoring=SCORING,
        tracking=store.tracking,
        input_filter=[["ds", "=", "2026-11-28"]],
    )
    assert sorted(open_table(out).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 4, 5]


def test_an_input_filter_delta_rs_cannot_take_fails_without_retry_naming_the_field(
    input_table, tmp_path, monkeypatch
):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_UNREACHABLE", json.dumps({"conn_type": "mlflow", "host": "http://127.0.0.1:9"})
    )
    op = SparkBatchInferenceOperator(
        task_id="score",
        model="models:/digits/1",
        input=input_table.to_dict(),
        table_uri=str(tmp_path / "scores"),
        partition={"ds": "2026-11-28"},
        scoring={"feature_columns": ["features"], "key_columns": ["id"]},
        input_filter=[["ds", "LIKE", "2026-11-%"]],
        mlflow_conn_id="mlflow_unreachable",
    )
    with pytest.raises(AirflowFailException, match=r"input_filter.*'like'"):
        op.execute({})
