"""Run every ``benchmarks/bench_*.py`` (or those named on the command line) and print their ratios.

Each module exposes ``run() -> list[dict]``; a result dict has ``name``, ``ratio``, ``goal`` (text
such as ``"<= 1.5"``), ``detail`` (the two measurements). Absolute times are only printed, never judged:
these machines are noisy, so every figure is a ratio against a reference measured in the same run.
Benchmarks are found by name (any ``bench_*.py``): adding one needs no change here.

Exits 1 when any figure misses its goal (the misses are listed last), 0 when all meet theirs.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time


def _meets(ratio: float, goal: str) -> bool:
    op, _, value = goal.partition(" ")
    target = float(value)
    return ratio <= target if op == "<=" else ratio >= target


def main(argv: list[str]) -> int:
    os.environ.setdefault("DLTRAIN_SPARK_MASTER", "local[2]")
    here = os.path.dirname(__file__)
    names = argv or sorted(m.name for m in pkgutil.iter_modules([here]) if m.name.startswith("bench_"))
    rows = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        for result in module.run():
            rows.append(result)
            verdict = "meets" if _meets(result["ratio"], result["goal"]) else "MISSES"
            print(
                f"   {result['name']}: {result['ratio']:.3f} (goal {result['goal']}, {verdict}) {result['detail']}",
                flush=True,
            )
        print(f"   ({time.perf_counter() - started:.1f}s)", flush=True)
    print("\nsummary")
    for r in rows:
        print(f"  {r['name']:<60} {r['ratio']:>8.3f}   goal {r['goal']}")
    misses = [r for r in rows if not _meets(r["ratio"], r["goal"])]
    for r in misses:
        print(f"MISSES: {r['name']}: {r['ratio']:.3f} (goal {r['goal']})")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
