"""The simulated year's model: a tiny classifier of ``label`` from ``value``, trained and gated nightly.

Small on purpose (a year of nightly training on 2 cores), but trained, logged, registered, gated and
scored by the same code a user's model goes through.
"""

from __future__ import annotations

from typing import Any

MODEL = "dltrain_year"
DAG_ID = "dltrain_year_retrain"
TRAIN_FN = "benchmarks.year_model:train"
HPARAMS = {"epochs": 3, "batch_size": 64, "lr": 0.02, "seed": 7}
METRIC = "val_loss"
SCORING = {"feature_columns": ["value"], "key_columns": ["id"], "partition_formats": {"ds": "date"}}


def _model() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))


def train(ctx: Any) -> dict[str, float]:
    """Three epochs of Adam on ``value`` -> ``label``; ``val_loss`` on the rows held out by ``id``."""
    import torch
    import torch.nn.functional as F

    hp = ctx.hparams
    model = ctx.wrap(_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hp["lr"]))
    columns = ["value", "label"]
    loaders = {
        split: ctx.dataloader(int(hp["batch_size"]), split=split, key="id", columns=columns)
        for split in ("train", "validation")
    }
    metrics: dict[str, float] = {}
    for epoch in range(int(hp["epochs"])):
        model.train()
        for batch in loaders["train"]:
            x, y = _inputs(batch), batch["label"].long()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        loss, count = 0.0, 0
        with torch.no_grad():
            for batch in loaders["validation"]:
                x, y = _inputs(batch), batch["label"].long()
                loss += float(F.cross_entropy(model(x), y, reduction="sum"))
                count += len(y)
        totals = ctx.allreduce({"loss": loss, "count": count})
        metrics = {METRIC: totals["loss"] / max(totals["count"], 1.0)}
        ctx.log_metrics(metrics, step=epoch)
    ctx.save_model(model, _inputs({"value": torch.tensor([0.5, 1.5])}))
    return metrics


def _inputs(batch: Any) -> Any:
    return batch["value"].float().reshape(-1, 1) / 24.0
