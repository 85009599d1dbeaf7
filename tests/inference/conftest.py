"""Fixtures for batch inference: a real Delta input table and real models in an MLflow SQLite store.

Both are session-scoped: logging a pt2 model costs seconds, and Spark workers cache loaded models
per (store, model URI), so sharing the store keeps the suite fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from inference_helpers import DAYS, N_CLASSES, N_FEATURES, ROWS_PER_DAY, arrow_rows, features

from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.store.config import TrackingConfig


@dataclass
class Store:
    """An MLflow store with model ``digits`` versions 1..3 (different weights), pt2 format."""

    tracking: TrackingConfig
    modules: dict[str, Any]  # version -> the torch module that was logged
    name: str = "digits"


@pytest.fixture(scope="session")
def input_table(tmp_path_factory) -> DeltaRef:
    """``ds``-partitioned table (id, features[64]) with two days; version 1 holds both."""
    from airflow_provider_dltrain.lake import overwrite_partition

    uri = str(tmp_path_factory.mktemp("inference-input") / "digits")
    ref = None
    for i, day in enumerate(DAYS):
        ref = overwrite_partition(uri, arrow_rows(features(ROWS_PER_DAY, i), i * ROWS_PER_DAY), {"ds": day})
    assert ref is not None
    return ref


@pytest.fixture(scope="session")
def multi_file_input(tmp_path_factory) -> DeltaRef:
    """One partition spread over several files, so Spark runs several tasks (and Python workers)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_provider_dltrain.lake import latest

    uri = str(tmp_path_factory.mktemp("inference-multi") / "digits")
    x = features(4_000, 7)
    for i in range(4):  # one append per file
        data = arrow_rows(x[i * 1_000 : (i + 1) * 1_000], i * 1_000)
        data = data.append_column("ds", pa.array(["2026-11-28"] * data.num_rows))
        write_deltalake(uri, data, partition_by=["ds"], mode="append")
    return latest(uri)


def _log(name: str, module: Any, example: Any, val_loss: float) -> None:
    import mlflow
    import mlflow.pytorch

    with mlflow.start_run():
        mlflow.log_metric("val_loss", val_loss)
        mlflow.pytorch.log_model(
            module,
            name="model",
            input_example=example,
            registered_model_name=name,
            serialization_format="pt2",
            pip_requirements=["torch"],  # skips seconds of requirement inference
        )


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Store:
    """MLflow SQLite store with ``digits`` v1, v2, v3 (each a small MLP with different weights)."""
    import torch

    root = Path(tmp_path_factory.mktemp("inference-mlflow"))
    tracking = TrackingConfig(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    tracking.apply()
    import mlflow

    from airflow_provider_dltrain.store.config import ensure_experiment

    # the experiment's artifacts next to the DB (MLflow's default for SQLite is ./mlruns in the cwd)
    mlflow.set_experiment(
        experiment_id=ensure_experiment(mlflow.MlflowClient(), "inference-tests", tracking.tracking_uri)
    )
    modules = {}
    for version in ("1", "2", "3"):
        torch.manual_seed(int(version))
        module = torch.nn.Sequential(
            torch.nn.Linear(N_FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, N_CLASSES)
        ).eval()
        _log("digits", module, features(4, 0), val_loss=1.0 - int(version) / 10)
        modules[version] = module
    return Store(tracking=tracking, modules=modules)


CHAMPION_FROM = {1: "2026-11-20", 2: "2026-11-25"}


@pytest.fixture(scope="session")
def promoted(store: Store) -> Store:
    """v1 champion from 2026-11-20, v2 (lower val_loss) from 2026-11-25; the live alias is on v2."""
    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote

    for version, cutoff in CHAMPION_FROM.items():
        result = gate_and_promote(
            store.tracking,
            model_name="digits",
            version=version,
            gate=GateSpec("val_loss"),
            data_cutoff=cutoff,
        )
        assert result.promoted, result
    return store
