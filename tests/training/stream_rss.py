"""Peak RSS growth of one loader pass, measured in a fresh process (run as a script by the tests).

``python stream_rss.py PLANS.pickle MODE BUFFER_MB``: the pickle holds two resolved ScanPlans (a
small warm-up table and the measured one; resolving reads the files, so it happens elsewhere).
The script warms the code paths (imports, threads, allocators) on the small one, resets the peak
(``VmHWM``), reads one epoch of the big one and prints ``<rows> <peak growth in bytes>``.
"""

from __future__ import annotations

import pickle
import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith(field))
    return int(line.split()[1]) * 1024


def peak_growth(plans_path: str, mode: str, buffer_mb: float) -> tuple[int, int]:
    from airflow_provider_dltrain.training.loader import LoaderSpec, iter_batches, units_of

    with open(plans_path, "rb") as handle:
        warm, big = (
            LoaderSpec(plan, 256, ("features",), mode=mode, shuffle_buffer_mb=buffer_mb)  # type: ignore[arg-type]
            for plan in pickle.load(handle)
        )
    for _ in iter_batches(warm, 0):
        pass
    if mode == "stream":
        units_of(big)  # the survey reads one row group per thread; not the streaming itself
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak restarts from the current RSS
    before = _status("VmRSS:")
    rows = sum(len(batch["features"]) for batch in iter_batches(big, 0))
    return rows, _status("VmHWM:") - before


if __name__ == "__main__":
    rows, growth = peak_growth(sys.argv[1], sys.argv[2], float(sys.argv[3]))
    print(rows, growth)
