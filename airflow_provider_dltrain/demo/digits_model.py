"""The demo model: a small CNN for the 8x8 digit images of the ingest table, and its ``train(ctx)``.

Table columns: ``features`` (64 floats in [0, 1]), ``label`` (0-9), ``ds`` (partition),
``source_file`` (the stable row key that decides train/validation). The model takes the
``features`` column as a ``(N, 64)`` float tensor, so batch scoring can feed it directly.

``train`` is an "oblivious" training function: the same code runs in a notebook, in one Airflow
task, or as 2-process DDP under TorchDistributor, e.g.::

    run_training("airflow_provider_dltrain.demo.digits_model:train", ref, {"epochs": 12},
                 backend="torch_distributor", backend_options={"num_processes": 2})

``evaluate_model`` is the promotion gate's ``evaluate_fn``: it scores any registered version on the
validation rows ``train`` holds out, so a challenger and its champion are judged on the same rows.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

DEFAULTS: dict[str, Any] = {
    "epochs": 12,
    "batch_size": 32,  # per rank
    "lr": 0.003,
    "validation_fraction": 0.2,
    "split_key": "source_file",
}
FEATURES, LABEL = "features", "label"


COMPONENTS = ("conv1", "conv2", "pool", "hidden")  # what an ablation may leave out (hparams["ablate"])


class DigitsNet(nn.Module):
    """Two 3x3 convolutions, max-pool, two linear layers: ~40k parameters, (N, 64) -> (N, 10) logits.

    ``without`` leaves one of :data:`COMPONENTS` out (an ablation trial): ``conv1`` or ``conv2`` (one
    convolution), ``pool`` (no max-pool) or ``hidden`` (no hidden linear layer). With ``without=None``
    the layers, their order and their initial weights are exactly those of the full model.
    """

    def __init__(self, channels: int = 16, hidden: int = 64, without: str | None = None) -> None:
        super().__init__()
        if without is not None and without not in COMPONENTS:
            raise ValueError(f"hparams['ablate'] must be one of {COMPONENTS} or None, got {without!r}")
        self.without = without
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1) if without != "conv1" else None
        conv2_in = 1 if without == "conv1" else channels
        self.conv2 = nn.Conv2d(conv2_in, 2 * channels, 3, padding=1) if without != "conv2" else None
        out_channels = channels if without == "conv2" else 2 * channels
        flat = out_channels * (64 if without == "pool" else 16)
        self.fc1 = nn.Linear(flat, hidden) if without != "hidden" else None
        self.fc2 = nn.Linear(hidden if without != "hidden" else flat, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, 1, 8, 8)
        for conv in (self.conv1, self.conv2):
            if conv is not None:
                x = F.relu(conv(x))
        if self.without != "pool":
            x = F.max_pool2d(x, 2)
        x = x.flatten(1)
        return self.fc2(F.relu(self.fc1(x)) if self.fc1 is not None else x)


def evaluate(ctx: Any, model: nn.Module, loader: Any) -> dict[str, float]:
    """Validation loss and accuracy over every rank's share of the validation split."""
    inner = getattr(model, "module", model)
    inner.eval()
    loss_sum, correct, count = 0.0, 0.0, 0.0
    with torch.no_grad():
        for batch in loader:
            x, y = batch[FEATURES].to(ctx.device), batch[LABEL].to(ctx.device)
            logits = inner(x)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += float((logits.argmax(1) == y).sum())
            count += len(y)
    totals = ctx.allreduce({"loss_sum": loss_sum, "correct": correct, "count": count})
    n = max(totals["count"], 1.0)
    return {"val_loss": totals["loss_sum"] / n, "val_accuracy": totals["correct"] / n}


def _split(hp: dict[str, Any]) -> dict[str, Any]:
    """Loader options that split rows by their stable key, the same way in ``train`` and evaluation."""
    return {
        "key": hp["split_key"],
        "validation_fraction": float(hp["validation_fraction"]),
        "columns": [FEATURES, LABEL],
    }


def evaluate_model(ctx: Any, model: nn.Module) -> dict[str, float]:
    """``val_loss`` and ``val_accuracy`` of a trained model on the validation split ``train`` holds out.

    The gate's ``evaluate_fn``: ``ctx.hparams`` (the challenger's training hyper-parameters) choose
    the split, and a row's split depends only on its key, so a champion trained with the same
    ``split_key`` and ``validation_fraction`` never trained on these rows either.
    """
    hp = {**DEFAULTS, **ctx.hparams}
    return evaluate(ctx, model, ctx.dataloader(256, split="validation", **_split(hp)))


def train(ctx: Any) -> dict[str, float]:
    """Train :class:`DigitsNet` with Adam; log loss and validation accuracy per epoch; log the model."""
    hp = {**DEFAULTS, **ctx.hparams}
    split = _split(hp)
    train_loader = ctx.dataloader(int(hp["batch_size"]), split="train", **split)
    val_loader = ctx.dataloader(256, split="validation", **split)
    model = ctx.wrap(DigitsNet(without=hp.get("ablate")))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hp["lr"]))
    metrics: dict[str, float] = {}
    for epoch in range(int(hp["epochs"])):
        model.train()
        loss_sum, count = 0.0, 0
        for batch in train_loader:
            x, y = batch[FEATURES].to(ctx.device), batch[LABEL].to(ctx.device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            count += len(y)
        totals = ctx.allreduce({"loss_sum": loss_sum, "count": count})
        metrics = {
            "train_loss": totals["loss_sum"] / max(totals["count"], 1.0),
            **evaluate(ctx, model, val_loader),
        }
        ctx.log_metrics(metrics, step=epoch)
    ctx.save_model(model)
    return metrics
