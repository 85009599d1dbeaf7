"""Registry fixtures: a real MLflow SQLite store per test and tiny real torch models in real runs.

Creating an MLflow database runs ~2 s of migrations, so one migrated template is made per session
and copied for each test: every test still gets its own empty store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from registry_helpers import TrainFn, make_train

from airflow_provider_dltrain.store.config import TrackingConfig

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")


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


@pytest.fixture
def train(tracking, tmp_path) -> TrainFn:
    return make_train(tracking, tmp_path / "artifacts")
