"""The search DAG's settings: ``dags/dltrain_search.py`` runs them and ``benchmarks/bench_search.py`` measures them.

One copy, so the figure in ``benchmarks/RESULTS.md`` is about the sampler the DAG runs (its space,
its ``n_startup_trials``, ``constant_liar``, two trials at a time) and the hyper-parameters every
trial shares, not about a look-alike.
"""

from __future__ import annotations

from typing import Any

SEARCH: dict[str, Any] = {
    "grid": {"lr": [0.01, 0.005, 0.003, 1e-5, 3e-6, 1e-6]}
}  # the last three barely learn
FIXED: dict[str, Any] = {"epochs": 4, "batch_size": 32, "seed": 7}
STOPPING: dict[str, Any] = {
    "rule": "median",
    "metric": "val_loss",
    "mode": "min",
    "grace_steps": 1,
    "min_trials": 1,
}
ABLATION: dict[str, Any] = {"ablate": ["conv1", "conv2", "pool", "hidden"]}
PARALLEL_TRIALS = 2  # the mapped training task's max_active_tis_per_dagrun
TPE: dict[str, Any] = {
    "optuna": {
        "n_trials": 12,
        "metric": "val_loss",
        "mode": "min",
        "seed": 7,
        "space": {"lr": {"loguniform": [1e-6, 3e-2]}},
        "sampler": {"name": "tpe", "constant_liar": True, "n_startup_trials": 4},
        "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 1},
    }
}
