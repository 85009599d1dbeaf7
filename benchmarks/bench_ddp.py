"""DDP scaling: samples/s of 2 DDP ranks (``backend="ddp"``) against 1 process, same training function.

Throughput is measured inside the training function over the epochs after the first (process and
Spark start-up, file reads and the first-step warm-up are excluded), and combined across ranks:
global samples / slowest rank's time. Both sides run one thread per process, the setting torchrun
gives each rank, so the ratio is what a second process adds. The model is a convolutional net
whose compute per sample (~0.11 GFLOP forward and backward) dwarfs its 0.11M-parameter gradient
all-reduce. Wall-clock ratios need two idle cores; on a shared machine the detail line also gives
the CPU-time-normalised ratio (each side's samples per CPU-second of its busiest process). The
same 2 ranks under TorchDistributor (torchrun beside a Spark driver) are printed beside it.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

ROWS = 3_072
EPOCHS = 3
ROUNDS = 2
BATCH = 64  # per rank; the 1-process run uses 2 x 64 so both see the same global batches


class BenchNet(nn.Module):
    """The 8x8 image upsampled to 16x16, three 3x3 convolutions of ``width`` channels, pooled, linear head.

    Upsampling raises the compute per parameter (256 positions per weight), so each step's
    gradient all-reduce is small next to its compute, as in real image models.
    """

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(width * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image = F.interpolate(x.reshape(-1, 1, 8, 8), scale_factor=2.0, mode="nearest")
        return self.head(self.convs(image).flatten(1))


def bench_train(ctx: Any) -> dict[str, float]:
    """SGD epochs over the table; returns global samples/s of the epochs after the first."""
    loader = ctx.dataloader(int(ctx.hparams["batch_size"]), columns=["features", "label"])
    model = ctx.wrap(BenchNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    samples, seconds, cpu = 0.0, 0.0, 0.0
    for epoch in range(int(ctx.hparams["epochs"])):
        ctx.barrier()
        started, cpu_started, seen = time.perf_counter(), time.process_time(), 0
        for batch in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(batch["features"]), batch["label"]).backward()
            optimizer.step()
            seen += len(batch["label"])
        ctx.barrier()
        if epoch > 0:
            samples, seconds = samples + seen, seconds + time.perf_counter() - started
            cpu += time.process_time() - cpu_started
    total = ctx.allreduce({"samples": samples})["samples"]
    slowest = ctx.allreduce({"seconds": seconds, "cpu": cpu}, op="max")
    # samples/s each rank would reach on a core of its own: CPU time, not wall time, per sample
    return {"samples_per_s": total / slowest["seconds"], "samples_per_cpu_s": total / slowest["cpu"]}


def _table(root: str) -> Any:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_dltrain import lake

    rng = np.random.default_rng(0)
    features = rng.random((ROWS, 64), dtype=np.float32)
    table = pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                pa.list_(pa.float32())
            ),
            "label": pa.array(rng.integers(0, 10, ROWS)),
        }
    )
    return lake.overwrite_partition(os.path.join(root, "t"), table, {"ds": "2026-11-28"})


def run() -> list[dict[str, Any]]:
    from airflow_provider_dltrain.training import run_training

    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as root:
        os.environ.setdefault("DLTRAIN_HOME", os.path.join(root, "home"))
        ref = _table(root)
        fn = "benchmarks.bench_ddp:bench_train"
        single = {"epochs": EPOCHS, "batch_size": 2 * BATCH}
        per_rank = {"epochs": EPOCHS, "batch_size": BATCH}

        def ranks(backend: str) -> Any:
            return run_training(
                fn, ref, per_rank, backend=backend, backend_options={"num_processes": 2}, tracking=False
            )

        ones, twos = [], []
        for _ in range(ROUNDS):  # interleaved: other load on the machine hits both sides alike
            ones.append(
                run_training(fn, ref, single, backend_options={"num_threads": 1}, tracking=False).metrics
            )
            twos.append(ranks("ddp").metrics)
        threads = run_training(fn, ref, single, backend_options={"num_threads": 2}, tracking=False)
        distributor = ranks("torch_distributor")
    one_rate = max(m["samples_per_s"] for m in ones)
    two_rate = max(m["samples_per_s"] for m in twos)
    # on dedicated cores: 2 ranks each at their per-CPU-second rate vs 1 process at its own
    projected = max(m["samples_per_cpu_s"] for m in twos) / max(m["samples_per_cpu_s"] for m in ones)
    load = os.getloadavg()[0]
    return [
        {
            "name": "DDP 2-process samples/s / 1-process (1 thread each)",
            "ratio": two_rate / one_rate,
            "goal": ">= 1.6",
            "detail": (
                f"2 ranks {two_rate:.0f} samples/s vs 1 process {one_rate:.0f} samples/s; "
                f"1 process with 2 threads {threads.metrics['samples_per_s']:.0f} samples/s; the same 2 ranks "
                f"under TorchDistributor (torchrun) {distributor.metrics['samples_per_s']:.0f} samples/s "
                f"({distributor.metrics['samples_per_s'] / one_rate:.2f}) "
                f"({sum(p.numel() for p in BenchNet().parameters()) / 1e6:.2f}M parameters); "
                f"load average {load:.1f} on {os.cpu_count()} cores; CPU-time-normalised ratio {projected:.2f} "
                "(what the ratio is when each rank has a free core)"
            ),
        }
    ]
