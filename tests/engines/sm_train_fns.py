"""Training functions the SageMaker tests ship to the fake's jobs (imported there by name)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.nn import functional as F

from airflow_provider_dltrain.demo.digits_model import DigitsNet
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS


def digits_partition(day_index: int, days: int) -> Any:
    """Rows ``day_index::days`` of sklearn's digits in the ingest table's schema."""
    import numpy as np
    import pyarrow as pa
    from sklearn.datasets import load_digits

    digits = load_digits()
    rows = np.arange(len(digits.target))[day_index::days]
    features = (digits.data[rows] / 16.0).astype("float32")
    return pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                pa.list_(pa.float32())
            ),
            "label": pa.array(digits.target[rows].astype("int64")),
            "source_file": pa.array([f"digits/{i:05d}.png" for i in rows]),
        }
    )


def demo_train(ctx: Any) -> dict[str, float]:
    """The demo's ``train``; refuses to run if any MLflow credential leaked into its environment."""
    from airflow_provider_dltrain.demo import digits_model

    leaked = [k for k in (*CREDENTIAL_KEYS, "DLTRAIN_MLFLOW_SECRET_ID") if k in os.environ]
    if leaked:
        raise RuntimeError(f"the training function can see {leaked}")
    return digits_model.train(ctx)


def failing_train(ctx: Any) -> dict[str, float]:
    if ctx.rank == 1:
        raise ValueError("boom on rank 1")
    ctx.barrier()
    return {}


def slow_train(ctx: Any) -> dict[str, float]:
    time.sleep(float(ctx.hparams.get("sleep_s", 600)))
    return {"slept": 1.0}


def resumable_train(ctx: Any) -> dict[str, float]:
    """Checkpoints after every epoch and resumes from the last one; ``step_sleep`` makes epochs last."""
    hp = ctx.hparams
    loader = ctx.dataloader(int(hp["batch_size"]), columns=["features", "label"])
    model = DigitsNet(channels=4, hidden=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    start = 0
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"]) + 1
    wrapped = ctx.wrap(model)
    loader.set_epoch(start)
    loss_sum, count = 0.0, 0
    for epoch in range(start, int(hp["epochs"])):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(wrapped(batch["features"]), batch["label"])
            loss.backward()
            optimizer.step()
            loss_sum, count = loss_sum + float(loss) * len(batch["label"]), count + len(batch["label"])
            time.sleep(float(hp.get("step_sleep", 0)))
        ctx.save_checkpoint(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        )
    return {"resumed_from_epoch": float(start), "train_loss": loss_sum / max(count, 1)}
