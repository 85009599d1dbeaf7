"""A training function: it never sees Airflow, Spark, ranks' addresses or MLflow URIs."""

from dataclasses import dataclass

import torch
from torch.nn import functional as F


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.layers(x)


@dataclass
class Accuracy:
    correct: int
    count: int


def evaluate(model, loader) -> Accuracy:
    correct = count = 0
    with torch.no_grad():
        for batch in loader:
            correct += int((model(batch["features"]).argmax(1) == batch["label"]).sum())
            count += len(batch["label"])
    return Accuracy(correct, count)


# --8<-- [start:train]
def train(ctx) -> dict[str, float]:
    hp = ctx.hparams
    common = {"key": "source_file", "validation_fraction": 0.2, "columns": ["features", "label"]}
    train_loader = ctx.dataloader(hp["batch_size"], split="train", **common)  # this rank's shard
    val_loader = ctx.dataloader(256, split="validation", **common)
    model = ctx.wrap(Net())  # DDP when world_size > 1
    opt = torch.optim.Adam(model.parameters(), lr=hp["lr"])
    for epoch in range(hp["epochs"]):
        for batch in train_loader:  # dict of ready tensors per batch
            x, y = batch["features"].to(ctx.device), batch["label"].to(ctx.device)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        acc = evaluate(model, val_loader)
        totals = ctx.allreduce({"correct": acc.correct, "count": acc.count})  # across ranks
        ctx.log_metrics({"val_accuracy": totals["correct"] / totals["count"]}, step=epoch)
    ctx.save_model(model)  # rank 0 logs the PyTorch model
    return {"val_accuracy": totals["correct"] / totals["count"]}


# --8<-- [end:train]


def main() -> None:
    # --8<-- [start:run]
    from airflow_provider_dltrain.training import run_training

    result = run_training(
        train,
        {"uri": "/data/lake/digits", "version": 7},
        {"epochs": 3, "batch_size": 32, "lr": 3e-3},
        backend="torch_distributor",
        backend_options={"num_processes": 2},
        data_filter=[["ds", "<=", "2026-11-28"]],
    )
    # --8<-- [end:run]
    print(result.model_uri, result.metrics)


def main_with_a_request() -> None:
    # --8<-- [start:request]
    from dataclasses import replace

    from airflow_provider_dltrain.training import TrainingRequest, run_training_request

    request = TrainingRequest(  # checked here: a bad field raises InvalidSpecError naming it
        train,
        {"uri": "/data/lake/digits", "version": 7},
        {"epochs": 3, "batch_size": 32, "lr": 3e-3},
        backend="torch_distributor",
        backend_options={"num_processes": 2},
        data_filter=[["ds", "<=", "2026-11-28"]],
    )
    first = run_training_request(request)
    slower = run_training_request(replace(request, hparams={**request.hparams, "lr": 1e-3}))
    # --8<-- [end:request]
    print(first.metrics, slower.metrics)


if __name__ == "__main__":
    main()
