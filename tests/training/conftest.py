"""Training fixtures: a real digits Delta table (one partition per day) and real MLflow SQLite stores."""

from __future__ import annotations

import os

import pytest
from training_digits import DAYS, write_digits

from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.store.config import TrackingConfig

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")


@pytest.fixture(scope="session")
def digits_ref(tmp_path_factory) -> DeltaRef:
    """All 1,797 digits over four ``ds`` partitions; versions 0..3 add one day each."""
    ref = write_digits(str(tmp_path_factory.mktemp("training-lake") / "digits"), DAYS)
    assert ref is not None and ref.version == len(DAYS) - 1
    return ref


@pytest.fixture
def tracking(tmp_path) -> TrackingConfig:
    return TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
