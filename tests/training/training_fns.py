"""Training functions used by the tests; importable by dotted path ("training_fns:traced_demo_train")."""

from __future__ import annotations

import json
import os
from typing import Any

from airflow_provider_dltrain.demo import digits_model
from airflow_provider_dltrain.exceptions import SchemaMismatchError

KEY = "source_file"


class _TracingLoader:
    """Wraps a DeltaLoader and records which row keys this rank saw in each epoch."""

    def __init__(self, loader: Any, ctx: Any, name: str) -> None:
        self.loader, self.ctx, self.name, self.epoch = loader, ctx, name, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        keys: list[str] = []
        for batch in self.loader:
            keys.extend(batch[KEY])
            yield batch
        trace_dir = self.ctx.hparams.get("trace_dir")
        if trace_dir:
            path = os.path.join(trace_dir, f"{self.name}-epoch{self.epoch}-rank{self.ctx.rank}.json")
            with open(path, "w") as handle:
                json.dump(keys, handle)
        self.epoch += 1


class TracingContext:
    """A TrainContext proxy whose loaders also return the row key, for exactly-once checks."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def dataloader(self, batch_size: int, **kwargs: Any) -> Any:
        columns = list(kwargs.pop("columns", None) or ["features", "label"])
        loader = self._ctx.dataloader(batch_size, columns=[*columns, KEY], **kwargs)
        return _TracingLoader(loader, self._ctx, kwargs.get("split") or "all")


def traced_demo_train(ctx: Any) -> dict[str, float]:
    """The demo's own ``train``, unchanged; the keys each rank saw go to ``hparams['trace_dir']``."""
    return digits_model.train(TracingContext(ctx))


def failing_train(ctx: Any) -> dict[str, float]:
    """Rank ``hparams['fail_rank']`` fails (a user error or a bug); the others wait in a collective."""
    if ctx.rank == int(ctx.hparams.get("fail_rank", 0)):
        if ctx.hparams.get("user_error"):
            raise SchemaMismatchError("column 'features' has 63 values in row 7, expected 64")
        raise ValueError(f"boom on rank {ctx.rank}")
    ctx.barrier()
    return {"never": 0.0}


def keyless_train(ctx: Any) -> dict[str, float]:
    """A small MLP with dropout on all rows, no split key: the row order comes from row content alone."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    model = ctx.wrap(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(ctx.hparams.get("lr", 0.1)))
    loader = ctx.dataloader(int(ctx.hparams.get("batch_size", 16)), columns=["features", "label"])
    loss_sum, count = 0.0, 0
    for _ in range(int(ctx.hparams.get("epochs", 2))):
        loss_sum, count = 0.0, 0
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch["features"]), batch["label"])
            loss.backward()
            optimizer.step()
            loss_sum, count = loss_sum + loss.item() * len(batch["label"]), count + len(batch["label"])
    totals = ctx.allreduce({"loss_sum": loss_sum, "count": count})
    ctx.save_model(model)
    return {"train_loss": totals["loss_sum"] / max(totals["count"], 1.0)}


def cooperative_train(ctx: Any) -> dict[str, float]:
    """Checks ``ctx.should_stop()`` after each epoch's metrics and stops by itself (no exception)."""
    import torch
    from torch import nn

    model = ctx.wrap(nn.Linear(64, 10))
    loader = ctx.dataloader(64, columns=["features", "label"])
    for epoch in range(int(ctx.hparams.get("epochs", 4))):
        for batch in loader:
            torch.nn.functional.cross_entropy(model(batch["features"]), batch["label"]).backward()
        ctx.log_metrics({"val_loss": 2.5}, step=epoch)
        if ctx.should_stop():
            ctx.save_model(model)
            return {"val_loss": 2.5, "stopped_by_itself": 1.0}
    return {"val_loss": 2.5, "stopped_by_itself": 0.0}


def non_finite_train(ctx: Any) -> dict[str, float]:
    """Every rank logs a NaN loss at step 0, then waits for the others (rank 0's check fails the run)."""
    import torch

    model = ctx.wrap(torch.nn.Linear(64, 10))
    ctx.log_metrics({"nan_loss": float("nan")}, step=0)
    ctx.barrier()
    ctx.save_model(model, torch.zeros(2, 64))
    return {"nan_loss": float("nan")}


def probe_train(ctx: Any) -> dict[str, float]:
    """Writes what the rank sees to ``hparams['trace_dir']/rank<r>.json``, sleeps ``hparams['sleep']`` s."""
    import time

    import torch

    seen = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "marker": os.environ.get("DLTRAIN_PROBE"),
        "cwd": os.getcwd(),
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }
    path = os.path.join(ctx.hparams["trace_dir"], f"rank{ctx.rank}.json")
    with open(f"{path}.tmp", "w") as handle:
        json.dump(seen, handle)
    os.replace(f"{path}.tmp", path)
    time.sleep(float(ctx.hparams.get("sleep", 0)))
    print(f"probe rank {ctx.rank} done", flush=True)
    ctx.barrier()
    return {"probed": 1.0}
