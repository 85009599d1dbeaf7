"""Peak RSS growth of one loader pass in a fresh process (``bench_loader`` runs this as a script).

``python -m benchmarks.rss_probe PLANS.pickle MODE BUFFER_MB COLUMN``: the pickle holds two resolved
ScanPlans (a small warm-up table, then the measured one; resolving reads the files, so it is done
by the caller). Warms the code paths on the small one, resets the peak (``VmHWM``), reads one
epoch of the big one and prints ``<rows> <baseline RSS bytes> <peak growth bytes>``.

``MODE=ray``: the same pass with Ray Data (``read_parquet`` of the plan's files, ``iter_torch_batches``
with a local shuffle buffer of ``BUFFER_MB``), on a local Ray started here. Ray reads in worker
processes and keeps blocks in its object store, so the RSS is the sum over this process and all its
descendants (the Ray daemons and workers), sampled every 20 ms; pages shared between them (the
object store's) count once per process that maps them.
"""

from __future__ import annotations

import pickle
import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith(field))
    return int(line.split()[1]) * 1024


def main(plans_path: str, mode: str, buffer_mb: float, column: str) -> None:
    from airflow_provider_dltrain.training.loader import LoaderSpec, iter_batches, units_of

    with open(plans_path, "rb") as handle:
        warm, big = (
            LoaderSpec(plan, 256, (column,), mode=mode, shuffle_buffer_mb=buffer_mb)  # type: ignore[arg-type]
            for plan in pickle.load(handle)
        )
    for _ in iter_batches(warm, 0):
        pass
    if mode == "stream":
        units_of(big)  # the survey: one row group per thread, before the stream itself
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak restarts from the current RSS
    before = _status("VmRSS:")
    rows = sum(len(batch[column]) for batch in iter_batches(big, 0))
    print(rows, before, _status("VmHWM:") - before)


def main_ray(plans_path: str, buffer_mb: float, column: str) -> None:
    import threading

    import psutil
    import ray
    import ray.data

    from airflow_provider_dltrain.lake.storage import join

    with open(plans_path, "rb") as handle:
        warm, big = ([join(p.ref.uri, f.path) for f in p.files] for p in pickle.load(handle))
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local Ray: no token written to ~/.ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    me = psutil.Process()

    def tree_rss() -> int:
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def one_pass(paths: list[str], row_bytes: int) -> int:
        dataset = ray.data.read_parquet(paths).select_columns([column])
        buffer_rows = max(256, int(buffer_mb * 2**20 // max(1, row_bytes)))
        batches = dataset.iter_torch_batches(
            batch_size=256, local_shuffle_buffer_size=buffer_rows, local_shuffle_seed=1
        )
        return sum(len(batch[column]) for batch in batches)

    row_bytes = 256 * 4  # the probe's tables: 256 float32 per row
    one_pass(warm, row_bytes)
    baseline = tree_rss()
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], tree_rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rows = one_pass(big, row_bytes)
    done.set()
    sampler.join()
    peak[0] = max(peak[0], tree_rss())
    ray.shutdown()
    print(rows, baseline, peak[0] - baseline)


if __name__ == "__main__":
    if sys.argv[2] == "ray":
        main_ray(sys.argv[1], float(sys.argv[3]), sys.argv[4])
    else:
        main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4])
