"""Batch scoring with a pandas UDF on a Spark standalone cluster: executors load the MLflow model."""

from __future__ import annotations

import numpy as np
import pytest
from inference_helpers import N_CLASSES, N_FEATURES, arrow_rows, expected, features

from airflow_provider_dltrain.inference import ScoringSpec, resolve_scoring_model, score_table
from airflow_provider_dltrain.lake import open_table, overwrite_partition
from airflow_provider_dltrain.store.config import TrackingConfig

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DS = "2026-11-28"
ROWS = 600


@pytest.fixture
def registered(tmp_path):
    """``digits`` version 1, a small MLP logged as pt2 into a SQLite store; yields (tracking, module)."""
    import mlflow
    import mlflow.pytorch
    import torch

    tracking = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    torch.manual_seed(3)
    module = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, N_CLASSES)
    ).eval()
    with tracking.activated():
        from airflow_provider_dltrain.store.config import ensure_experiment

        client = mlflow.MlflowClient()
        mlflow.set_experiment(
            experiment_id=ensure_experiment(client, "cluster-scoring", tracking.tracking_uri)
        )
        with mlflow.start_run():
            mlflow.pytorch.log_model(
                module,
                name="model",
                input_example=features(4, 0),
                registered_model_name="digits",
                serialization_format="pt2",
                pip_requirements=["torch"],
            )
    return tracking, module


def test_scoring_on_the_cluster_matches_the_model_run_in_process(cluster_spark, registered, tmp_path):
    tracking, module = registered
    x = features(ROWS, 5)
    source = overwrite_partition(str(tmp_path / "input"), arrow_rows(x, 0), {"ds": DS})
    out = str(tmp_path / "scores")
    model = resolve_scoring_model("models:/digits/1", tracking)
    ref = score_table(
        cluster_spark,
        model,
        source,
        out,
        {"ds": DS},
        scoring=ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=200),
        tracking=tracking,
    )

    table = open_table(out, ref.version).to_pyarrow_table().sort_by("id")
    assert table.column("id").to_pylist() == list(range(ROWS))
    labels, scores = expected(module, x)
    np.testing.assert_array_equal(table.column("prediction").to_numpy(), labels)
    np.testing.assert_allclose(table.column("score").to_numpy(), scores, rtol=1e-5)
    assert set(table.column("model_version").to_pylist()) == {1}
