"""Delta -> torch loader throughput against a raw pyarrow scan of the same files into tensors.

Both sides read the same Parquet files (one pinned Delta version) and produce the same tensors
(``features`` (B, 64) float32, ``label`` (B,) int64) per batch. The reference is pyarrow's
multi-threaded dataset scanner with no shuffle, no split and no sharding; the loader does all of
those (shuffled, one rank of one) from a cold cache. Best of several interleaved rounds.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

ROWS = 300_000
DAYS = 4
BATCH = 256
ROUNDS = 5


def _write_table(root: str) -> Any:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_dltrain import lake

    rng = np.random.default_rng(0)
    per_day = ROWS // DAYS
    ref = None
    for day in range(DAYS):
        features = rng.random((per_day, 64), dtype=np.float32)
        table = pa.table(
            {
                "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                    pa.list_(pa.float32())
                ),
                "label": pa.array(rng.integers(0, 10, per_day)),
                "source_file": pa.array([f"img/{day}/{i:06d}.png" for i in range(per_day)]),
            }
        )
        ref = lake.overwrite_partition(os.path.join(root, "t"), table, {"ds": f"2026-11-{day + 1:02d}"})
    return ref


def _raw_scan(paths: list[str]) -> int:
    """Reference: pyarrow dataset scan, each record batch straight into tensors."""
    import pyarrow.dataset as pads
    import torch

    batches = 0
    dataset = pads.dataset(paths, format="parquet")
    for batch in dataset.to_batches(columns=["features", "label"], batch_size=BATCH):
        values = batch.column("features").flatten().to_numpy(zero_copy_only=False)
        features = torch.from_numpy(values.reshape(-1, 64))
        label = torch.from_numpy(batch.column("label").to_numpy(zero_copy_only=False))
        batches += int(features.shape[0] > 0 and label.shape[0] > 0)
    return batches


def _loader(plan: Any, num_workers: int = 0) -> int:
    from airflow_provider_dltrain.training import loader as loader_module

    loader_module._CACHE.clear()  # cold: the loader reads the files itself
    spec = loader_module.LoaderSpec(plan, BATCH, ("features", "label"), shuffle=True, seed=1)
    return sum(1 for _ in loader_module.DeltaLoader(spec, num_workers=num_workers))


def _best(fn: Any, *args: Any) -> tuple[float, int]:
    started = time.perf_counter()
    count = fn(*args)
    return time.perf_counter() - started, count


def run() -> list[dict[str, Any]]:
    from airflow_provider_dltrain.lake.storage import join
    from airflow_provider_dltrain.training import resolve

    with tempfile.TemporaryDirectory(prefix="bench-loader-") as root:
        ref = _write_table(root)
        plan = resolve(ref)
        paths = [join(ref.uri, f.path) for f in plan.files]
        raw_times, loader_times = [], []
        for _ in range(ROUNDS):  # interleaved, so background load hits both sides alike
            raw_s, raw_batches = _best(_raw_scan, paths)
            loader_s, loader_batches = _best(_loader, plan)
            raw_times.append(raw_s)
            loader_times.append(loader_s)
        workers_s, _ = _best(_loader, plan, 2)
    raw_rate = raw_batches / min(raw_times)
    loader_rate = loader_batches / min(loader_times)
    return [
        {
            "name": "loader batches/s / raw pyarrow scan-to-tensor (cold, shuffled)",
            "ratio": loader_rate / raw_rate,
            "goal": ">= 0.95",
            "detail": (
                f"loader {loader_rate:.0f} batches/s vs raw {raw_rate:.0f} batches/s ({ROWS} rows, batch {BATCH}, "
                f"{len(paths)} files); with 2 DataLoader worker processes {loader_batches / workers_s:.0f} batches/s"
            ),
        }
    ]
