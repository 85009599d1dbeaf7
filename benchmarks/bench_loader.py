"""Delta -> torch loader: against the shuffled limit, against peers, and its streaming memory.

* **shuffled limit** (goal >= 0.9): the same selection read with pyarrow's threads in one call,
  converted once into tensors, plus one seeded permutation gathered in blocks - the least any
  shuffled loader costs. The loader (memory mode, cold cache, shuffled, content-ordered, one rank
  of one) does all of that and its content order. Printed beside it: the unshuffled **limit**
  (batches as zero-copy slices, no shuffle), which no shuffled loader can reach, and the shuffled
  limit over rows in content order (the order computed as the loader does), which is what the loader
  does less its own code.
* **peer** (goal >= 1.0): a torch ``DataLoader`` over an ``IterableDataset`` that yields the pyarrow
  dataset's record batches as tensors (``batch_size=None``, in-process, no shuffle).
* **Ray Data** (goal >= 1.0, when ``ray`` is importable): ``read_parquet`` of the same files and
  columns, ``iter_torch_batches`` with a local shuffle buffer of 64 batches and a seed, on a local
  Ray started before the clock (its start is not counted); best of 3 passes.
* **memory**: peak RSS growth of a fresh process streaming a table 16x the shuffle buffer, against
  the buffer (goal: at most 2 buffers; the process's own baseline is printed); Ray Data's peak for
  the same pass and buffer (its processes summed, see ``rss_probe``) is printed beside it.

Interleaved rounds, best of each side.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
from typing import Any

ROWS = 300_000
DAYS = 4
BATCH = 256
ROUNDS = 15  # each side takes about 0.1 s: the best of 5 still varied by 30 % between runs
STREAM_ROWS, STREAM_BUFFER_MB = 64_000, 4.0  # 64 MB of 256-float rows through a 4 MB buffer


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


def _limit(paths: list[str]) -> int:
    """The limit: one threaded read, one conversion, batches as views."""
    import pyarrow.dataset as pads
    import torch

    table = pads.dataset(paths, format="parquet").to_table(columns=["features", "label"], use_threads=True)
    values = table.column("features").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    features = torch.from_numpy(values.reshape(-1, 64))
    label = torch.from_numpy(table.column("label").combine_chunks().to_numpy(zero_copy_only=False))
    batches = 0
    for start in range(0, len(label), BATCH):
        f, y = features[start : start + BATCH], label[start : start + BATCH]
        batches += int(f.shape[0] > 0 and y.shape[0] > 0)
    return batches


def _shuffled_limit(paths: list[str], content_ordered: bool = False) -> int:
    """The limit plus what any shuffled loader must add: one seeded permutation, gathered in blocks.

    ``content_ordered``: the permutation applies to the rows in content order, computed as the
    loader does (printed: what content ordering adds to the shuffled limit).
    """
    import numpy as np
    import pyarrow.dataset as pads
    import torch

    from airflow_provider_dltrain.training.ordering import content_order

    table = pads.dataset(paths, format="parquet").to_table(columns=["features", "label"], use_threads=True)
    values = table.column("features").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    features = torch.from_numpy(values.reshape(-1, 64))
    label = torch.from_numpy(table.column("label").combine_chunks().to_numpy(zero_copy_only=False))
    order = torch.randperm(len(label), generator=torch.Generator().manual_seed(1))
    if content_ordered:
        order = torch.from_numpy(content_order(table).astype(np.int64))[order]
    batches = 0
    block = BATCH * 128
    for first in range(0, len(label), block):
        rows = order[first : first + block]
        f_block, y_block = features.index_select(0, rows), label.index_select(0, rows)
        for start in range(0, len(rows), BATCH):
            f, y = f_block[start : start + BATCH], y_block[start : start + BATCH]
            batches += int(f.shape[0] > 0 and y.shape[0] > 0)
    return batches


def _ordered_limit(paths: list[str]) -> int:
    return _shuffled_limit(paths, content_ordered=True)


def _peer(paths: list[str]) -> int:
    """torch DataLoader over a pyarrow dataset's record batches."""
    from torch.utils.data import DataLoader

    from benchmarks._arrow_iterable import ArrowBatches

    return sum(1 for _ in DataLoader(ArrowBatches(paths, BATCH), batch_size=None, num_workers=0))


def _ray_started() -> bool:
    """A local Ray for the Ray Data peer (started before any clock runs); False without ``ray``."""
    try:
        import ray
        import ray.data
    except ImportError:
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local Ray: no token written to ~/.ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # one INFO line per pass otherwise
    return True


def _ray(paths: list[str]) -> int:
    import ray.data

    dataset = ray.data.read_parquet(paths).select_columns(["features", "label"])
    batches = dataset.iter_torch_batches(
        batch_size=BATCH, local_shuffle_buffer_size=BATCH * 64, local_shuffle_seed=1
    )
    return sum(1 for _ in batches)


def _loader(plan: Any, num_workers: int = 0) -> int:
    from airflow_provider_dltrain.training import loader as loader_module

    loader_module._CACHE.clear()  # cold: the loader reads the files itself
    spec = loader_module.LoaderSpec(plan, BATCH, ("features", "label"), shuffle=True, seed=1, mode="memory")
    return sum(1 for _ in loader_module.DeltaLoader(spec, num_workers=num_workers))


def _timed(fn: Any, *args: Any) -> tuple[float, int]:
    started = time.perf_counter()
    count = fn(*args)
    return time.perf_counter() - started, count


def _throughput(root: str) -> list[dict[str, Any]]:
    from airflow_provider_dltrain.lake.storage import join
    from airflow_provider_dltrain.training import resolve

    ref = _write_table(root)
    plan = resolve(ref)
    paths = [join(ref.uri, f.path) for f in plan.files]
    times: dict[str, list[float]] = {"limit": [], "shuffled": [], "ordered": [], "peer": [], "loader": []}
    counts: dict[str, int] = {}
    sides = (
        ("limit", _limit, paths),
        ("shuffled", _shuffled_limit, paths),
        ("ordered", _ordered_limit, paths),
        ("peer", _peer, paths),
        ("loader", _loader, plan),
    )
    for _ in range(ROUNDS):  # interleaved, so background load hits every side alike
        for name, fn, arg in sides:
            seconds, counts[name] = _timed(fn, arg)
            times[name].append(seconds)
    rate = {name: counts[name] / min(times[name]) for name in times}
    workers_s, _ = _timed(_loader, plan, 2)
    common = f"{ROWS} rows, batch {BATCH}, {len(paths)} files"
    results = [
        {
            "name": "loader batches/s / the shuffled limit (the limit + a seeded permutation gather)",
            "ratio": rate["loader"] / rate["shuffled"],
            "goal": ">= 0.9",
            "detail": (
                f"loader {rate['loader']:.0f} batches/s (memory mode, cold, shuffled, content-ordered) vs "
                f"{rate['shuffled']:.0f} batches/s ({common}); the unshuffled limit {rate['limit']:.0f} "
                f"batches/s (loader / that: {rate['loader'] / rate['limit']:.2f}, no goal); the shuffled limit "
                f"over rows in content order {rate['ordered']:.0f} batches/s (loader / that: "
                f"{rate['loader'] / rate['ordered']:.2f}); "
                f"2 DataLoader worker processes {counts['loader'] / workers_s:.0f} batches/s"
            ),
        },
        {
            "name": "loader batches/s / torch DataLoader over a pyarrow dataset",
            "ratio": rate["loader"] / rate["peer"],
            "goal": ">= 1.0",
            "detail": f"loader {rate['loader']:.0f} vs DataLoader {rate['peer']:.0f} batches/s ({common})",
        },
    ]
    if _ray_started():
        import ray

        try:
            ray_s = min(_timed(_ray, paths)[0] for _ in range(3))
        finally:
            ray.shutdown()
        ray_rate = counts["loader"] / ray_s
        results.append(
            {
                "name": "loader batches/s / Ray Data iter_torch_batches (local shuffle, seed)",
                "ratio": rate["loader"] / ray_rate,
                "goal": ">= 1.0",
                "detail": (
                    f"loader {rate['loader']:.0f} vs Ray Data {ray_rate:.0f} batches/s ({common}; Ray's local "
                    f"shuffle buffer {BATCH * 64} rows, local Ray started before timing, best of 3)"
                ),
            }
        )
    else:
        print("   note: ray not importable: the Ray Data peer is skipped", flush=True)
    return results


def _streaming_memory(root: str) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    from airflow_provider_dltrain.training import resolve

    plans = []
    for name, rows in (("warm", 4_000), ("big", STREAM_ROWS)):
        features = np.random.default_rng(0).random((rows, 256), dtype=np.float32)
        table = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 256)})
        uri = os.path.join(root, name)
        write_deltalake(uri, table, writer_properties=WriterProperties(max_row_group_size=250))
        plans.append(resolve({"uri": uri, "version": 0}))
    table_bytes = table.nbytes
    path = os.path.join(root, "plans.pickle")
    with open(path, "wb") as handle:
        pickle.dump(plans, handle)
    command = [sys.executable, "-m", "benchmarks.rss_probe", path, "stream", str(STREAM_BUFFER_MB), "x"]
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    seconds = time.perf_counter() - started
    rows, baseline, growth = (int(v) for v in out)
    buffer = STREAM_BUFFER_MB * 2**20
    ray_note = "Ray Data: ray not importable"
    try:
        import ray  # noqa: F401
    except ImportError:
        pass
    else:
        command[4] = "ray"
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
        ray_rows, ray_baseline, ray_growth = (int(v) for v in out)
        ray_note = (
            f"Ray Data the same pass with the same shuffle buffer: {ray_growth / 2**20:.1f} MB above "
            f"{ray_baseline / 2**20:.0f} MB (this process and Ray's, summed; {ray_rows} rows) = "
            f"{ray_growth / buffer:.1f} buffers"
        )
    return {
        "name": "peak RSS growth streaming a 16x-buffer table / buffer",
        "ratio": growth / buffer,
        "goal": "<= 2.0",
        "detail": (
            f"{growth / 2**20:.1f} MB above a {baseline / 2**20:.0f} MB baseline, buffer {STREAM_BUFFER_MB:.0f} MB, "
            f"table {table_bytes / 2**20:.0f} MB decoded ({rows} rows, row groups of 0.25 MB), "
            f"{rows / seconds:,.0f} rows/s incl. process start; {ray_note}"
        ),
    }


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-loader-") as root:
        results = _throughput(root)
        results.append(_streaming_memory(root))
    return results
