"""What checking a landed CSV costs: a plain copy, and the checked copy Spark reads (``etl.landing_reads``).

Run: ``python -m benchmarks.bench_landing_check [MiB]`` (default 200). Prints the best of three runs of
each, in seconds and MiB/s: ``shutil.copyfile`` (the floor), the staged copy with the line check, and
the staged copy with the CSV ``multiLine`` record check on quoted fields.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from airflow_provider_dltrain.etl.landing_reads import RecordRule, check_records, release_staged, stage_files


def _best(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
        release_staged()
    return min(times)


def main(mib: int = 200) -> None:
    root = tempfile.mkdtemp()
    os.environ["DLTRAIN_HOME"] = root
    day = os.path.join(root, "day")
    os.makedirs(day)
    plain, quoted = os.path.join(day, "plain.csv"), os.path.join(day, "quoted.csv")
    line, qline = (
        b"12345,abcdefghij,3.14159,2026-11-28\n",
        b'12345,"abc, ""quoted"" def",3.14159,2026-11-28\n',
    )
    with open(plain, "wb") as out:
        out.write(b"id,name,x,ds\n" + line * ((mib << 20) // len(line)))
    with open(quoted, "wb") as out:
        out.write(b"id,name,x,ds\n" + qline * ((mib << 20) // len(qline)))
    lines, records = RecordRule(), RecordRule.of("csv", {"multiLine": "true"})
    results = {
        "plain copy (shutil.copyfile)": _best(lambda: shutil.copyfile(plain, os.path.join(root, "copy.csv"))),
        "checked copy, lines": _best(
            lambda: stage_files(day, [plain], check=lambda p, c: check_records(p, c, 1 << 20, lines))
        ),
        "checked copy, csv multiLine (quoted fields)": _best(
            lambda: stage_files(day, [quoted], check=lambda p, c: check_records(p, c, 1 << 20, records))
        ),
    }
    for name, seconds in results.items():
        print(f"{name}: {seconds:.2f} s for {mib} MiB ({mib / seconds:.0f} MiB/s)")
    shutil.rmtree(root)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
