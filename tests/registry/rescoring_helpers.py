"""Helpers of the re-scoring gate tests: a real digits Delta table, and scoring done by hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
SPLIT = {"key": "source_file", "validation_fraction": 0.2, "columns": ["features", "label"]}
DEMO_EVALUATE = "airflow_provider_dltrain.demo.digits_model:evaluate_model"


def write_digits(uri: str, days: Sequence[str] = DAYS):
    """sklearn's digits, rows ``i::len(days)`` in partition ``ds = days[i]``; one commit per day."""
    import numpy as np
    import pyarrow as pa
    from sklearn.datasets import load_digits

    from airflow_provider_dltrain import lake

    digits = load_digits()
    ref = None
    for i, day in enumerate(days):
        rows = np.arange(len(digits.target))[i :: len(days)]
        features = (digits.data[rows] / 16.0).astype("float32")
        table = pa.table(
            {
                "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                    pa.list_(pa.float32())
                ),
                "label": pa.array(digits.target[rows].astype("int64")),
                "source_file": pa.array([f"digits/{r:05d}.png" for r in rows]),
            }
        )
        ref = lake.overwrite_partition(uri, table, {"ds": day})
    return ref


def score_by_hand(tracking: Any, model_uri: str, dataset: Any, data_filter: Any, tmp_path: Any) -> dict:
    """Accuracy and row count of ``model_uri`` on the validation split of ``dataset`` + ``data_filter``.

    Written independently of the gate: the model comes straight from MLflow, rows from a plain
    ``TrainContext`` loader, and accuracy is counted here.
    """
    import mlflow
    import torch

    from airflow_provider_dltrain.lake.scan_plan import resolve
    from airflow_provider_dltrain.training.context import TrainContext

    tracking.apply()
    model = mlflow.pytorch.load_model(model_uri, map_location="cpu")
    ctx = TrainContext(plan=resolve(dataset, data_filter), hparams={}, checkpoint_dir=str(tmp_path))
    correct = count = 0
    with torch.no_grad():
        for batch in ctx.dataloader(100, split="validation", **SPLIT):
            correct += int((model(batch["features"]).argmax(1) == batch["label"]).sum())
            count += len(batch["label"])
    return {"val_accuracy": correct / count, "rows": count}
