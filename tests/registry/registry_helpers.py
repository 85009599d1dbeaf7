"""Helpers shared by the registry tests: a fake training run that logs a tiny real torch model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.store.config import TrackingConfig

TrainFn = Callable[..., dict[str, Any]]


def make_train(tracking: TrackingConfig, artifact_root: Path | None) -> TrainFn:
    """A function that runs a fake training: one MLflow run, a tiny torch model, dltrain tags.

    Returns the TrainResult dict the training operator would push to XCom.
    """
    import mlflow
    import torch

    tracking.apply()
    client = tracking.client()
    location = artifact_root.as_uri() if artifact_root is not None else None  # None: the server's default
    experiment_id = client.create_experiment("registry-tests", artifact_location=location)
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
