"""Registry fixtures: a real MLflow SQLite store per test and tiny real torch models in real runs.

Creating an MLflow database runs ~2 s of migrations, so one migrated template is made per session
and copied for each test: every test still gets its own empty store.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dltrain.registry.config import TrackingConfig

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

TrainFn = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def _migrated_mlflow_db(tmp_path_factory) -> Path:
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    uri = f"sqlite:///{path}"
    MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments()
    return path


@pytest.fixture
def mlflow_uri(tmp_path, _migrated_mlflow_db) -> str:
    """A fresh, already migrated MLflow SQLite store in this test's tmp_path."""
    path = tmp_path / "mlflow.db"
    shutil.copy(_migrated_mlflow_db, path)
    return f"sqlite:///{path}"


@pytest.fixture
def tracking(mlflow_uri) -> TrackingConfig:
    return TrackingConfig(tracking_uri=mlflow_uri)


def make_train(tracking: TrackingConfig, artifact_root: Path) -> TrainFn:
    """A function that runs a fake training: one MLflow run, a tiny torch model, dltrain tags.

    Returns the TrainResult dict the training operator would push to XCom.
    """
    import mlflow
    import torch

    tracking.apply()
    client = tracking.client()
    experiment_id = client.create_experiment("registry-tests", artifact_location=artifact_root.as_uri())
    counter = {"n": 0}

    def train(cutoff: str, metrics: dict[str, float], **extra_tags: str) -> dict[str, Any]:
        counter["n"] += 1
        tags = {
            "dltrain.dag_id": "nightly",
            "dltrain.run_id": f"scheduled__{cutoff}",
            "dltrain.logical_date": f"{cutoff}T00:00:00+00:00",
            "dltrain.data_cutoff": cutoff,
            "dltrain.delta_ref": f'{{"uri": "/lake/t", "version": {counter["n"]}, "timestamp": null}}',
            "dltrain.delta_uri": "/lake/t",
            "dltrain.delta_version": str(counter["n"]),
            "dltrain.provider_version": "0.1.0",
            "dltrain.code_hash": "c0de",
            "dltrain.params_hash": "9a7a",
            "dltrain.data_fingerprint": f"fp-{counter['n']}",
            "unrelated.tag": "not copied",
            **extra_tags,
        }
        with mlflow.start_run(experiment_id=experiment_id, tags=tags) as run:
            mlflow.log_metrics(metrics)
            torch.manual_seed(counter["n"])
            info = mlflow.pytorch.log_model(
                torch.nn.Linear(2, 1), name="model", pip_requirements=["torch"], serialization_format="pickle"
            )
        return {
            "run_id": run.info.run_id,
            "model_uri": info.model_uri,
            "metrics": dict(metrics),
            "dataset": {"uri": "/lake/t", "version": counter["n"], "timestamp": None},
            "params": {"lr": 0.1},
        }

    return train


@pytest.fixture
def train(tracking, tmp_path) -> TrainFn:
    return make_train(tracking, tmp_path / "artifacts")
