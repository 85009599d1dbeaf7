"""Wall time of the ``dltrain`` read-only commands, whole process, against the lookup they make.

Each command runs as its own process (interpreter start and imports included), as a user runs it:
``champion --help``, ``lineage --help``, ``champion m --as-of D`` (MLflow on SQLite, the store found
through ``$MLFLOW_TRACKING_URI``) and ``lineage <table>`` (a local prediction table naming a model
version, so MLflow is read too). Each lookup is paired with a bare script making the same calls with
the same libraries (``mlflow``'s client, ``deltalake``): the difference is what the command adds
(argument parsing, this package's imports, connection lookup, formatting). Runs alternate command
and bare script, so drift of a shared machine hits both; medians are reported.

Goal per lookup: the command's median over the bare script's <= 1.5 (what the command adds must
stay small next to the lookup). The ``--help`` figures are printed: their goal, <= 3 s, is an
absolute time and this runner judges ratios only.

``python -m benchmarks.bench_cli [RUNS]`` prints the figures (default 7 runs each).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = 7

BARE_CHAMPION = """
import sys
from mlflow import MlflowClient
c = MlflowClient(tracking_uri=sys.argv[1], registry_uri=sys.argv[1])
c.get_registered_model("m")
for mv in c.search_model_versions("name='m'"):
    c.get_model_version("m", mv.version)
c.get_model_version_by_alias("m", "champion")
"""

BARE_LINEAGE = """
import sys
from deltalake import DeltaTable
DeltaTable(sys.argv[2]).history()
from mlflow import MlflowClient
c = MlflowClient(tracking_uri=sys.argv[1], registry_uri=sys.argv[1])
c.get_model_version("m", "1")
"""


def _setup(root: Path) -> tuple[str, str]:
    """An MLflow store with a promoted model ``m`` and a prediction table naming its version 1."""
    import pyarrow as pa

    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.lake.write import commit_metadata
    from airflow_provider_dltrain.registry import GateSpec, gate_and_promote
    from airflow_provider_dltrain.store.config import TrackingConfig

    store = f"sqlite:///{root / 'mlflow.db'}"
    tracking = TrackingConfig(tracking_uri=store)
    client = tracking.client()
    client.create_registered_model("m")
    gate = GateSpec(metric="val_accuracy", mode="max")
    for version, cutoff, value in ((1, "2026-11-24", "0.9"), (2, "2026-11-26", "0.95")):
        client.create_model_version(
            "m", f"file:///tmp/m{version}", tags={"dltrain.metric.val_accuracy": value}
        )
        gate_and_promote(tracking, model_name="m", version=version, gate=gate, data_cutoff=cutoff)
    table = str(root / "predictions")
    meta = commit_metadata(model_name="m", model_version="1", model_uri="models:/m/1")
    lake.overwrite_partition(table, pa.table({"x": [1, 2]}), {"ds": "2026-11-28"}, metadata=meta)
    return store, table


def _wall(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-1000:]}")
    return took


def measure(runs: int = RUNS) -> dict[str, dict[str, float]]:
    """Median, min and max wall seconds of each command (and bare lookup), runs interleaved."""
    py = sys.executable
    dltrain = [py, "-m", "airflow_provider_dltrain"]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        store, table = _setup(Path(tmp))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AIRFLOW_CONN_"))}
        env.update(MLFLOW_TRACKING_URI=store, PYTHONPATH=str(REPO), DLTRAIN_HOME=tmp)
        commands = {
            "champion --help": [*dltrain, "champion", "--help"],
            "lineage --help": [*dltrain, "lineage", "--help"],
            "champion m --as-of 2026-11-25": [*dltrain, "champion", "m", "--as-of", "2026-11-25"],
            "bare MLflow lookup of champion": [py, "-c", BARE_CHAMPION, store],
            "lineage <table>": [*dltrain, "lineage", table],
            "bare Delta + MLflow lookup of lineage": [py, "-c", BARE_LINEAGE, store, table],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # warm-up: page cache, .pyc files
            _wall(argv, env)
        for _ in range(runs):
            for name, argv in commands.items():
                times[name].append(_wall(argv, env))
    return {name: {"median": statistics.median(t), "min": min(t), "max": max(t)} for name, t in times.items()}


def run() -> list[dict[str, object]]:
    figures = measure()
    rows = []
    for command, bare in (
        ("champion m --as-of 2026-11-25", "bare MLflow lookup of champion"),
        ("lineage <table>", "bare Delta + MLflow lookup of lineage"),
    ):
        a, b = figures[command]["median"], figures[bare]["median"]
        rows.append(
            {
                "name": f"dltrain {command} ÷ the same lookup in a bare script",
                "ratio": a / b,
                "goal": "<= 1.5",
                "detail": f"{a:.2f} s vs {b:.2f} s (median of {RUNS}); the command adds {a - b:+.2f} s",
            }
        )
    for command in ("champion --help", "lineage --help"):
        f = figures[command]
        print(f"   dltrain {command}: median {f['median']:.2f} s (min {f['min']:.2f}, max {f['max']:.2f})")
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    for name, f in measure(n).items():
        print(f"{name:<40} median {f['median']:6.2f} s   min {f['min']:6.2f}   max {f['max']:6.2f}")
