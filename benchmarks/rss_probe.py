"""Peak RSS growth of one loader pass in a fresh process (``bench_loader`` runs this as a script).

``python -m benchmarks.rss_probe PLANS.pickle MODE BUFFER_MB COLUMN``: the pickle holds two resolved
ScanPlans (a small warm-up table, then the measured one; resolving reads the files, so it is done
by the caller). Warms the code paths on the small one, resets the peak (``VmHWM``), reads one
epoch of the big one and prints ``<rows> <baseline RSS bytes> <peak growth bytes>``.
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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4])
