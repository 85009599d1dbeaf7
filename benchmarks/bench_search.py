"""Adaptive search against a control: trials TPE and an independent random search need to match random's best.

The problem is the search DAG's own (``airflow_provider_dltrain.demo.search_settings``, which
``dags/dltrain_search.py`` runs): its space (the learning rate, log scale), the hyper-parameters
every trial shares (epochs, batch size), its TPE sampler options (``n_startup_trials``,
``constant_liar``) and its parallelism (2 trials at a time, the second asked while the first runs).
The objective is the demo's digits CNN (``DigitsNet``) trained on sklearn's digits (the images the
demo ingests) with those hyper-parameters, a fixed 80/20 split, fixed initial weights and batch
order; validation loss. Training is measured at ``GRID`` learning rates evenly spaced in log scale
over the space, and a trial's value is that curve at its learning rate (linear in log lr between two
measured points): one training costs seconds on these machines, and the figure needs thousands of
trials over many seeds, so every trial reads the same measured curve.

For each of ``SEEDS`` seeds ``s``:

- **target**: the best validation loss of 24 trials of the ``random`` sampler (seed ``s``);
- **TPE**: the DAG's sampler (seed ``1000 + s``), two trials at a time, until a trial reaches the
  target, at most ``CAP`` trials;
- **control**: an independent ``random`` search (seed ``2000 + s``) until a trial reaches the target,
  at most ``CAP`` trials. Its median is what "no adaptivity" costs: about 24 (the first of ``k``
  fresh trials beats the best of 24 with probability ``k / (k + 24)``).

Figure: median(TPE's trials) / median(control's trials); goal <= 0.6. A seed that does not reach the
target within ``CAP`` counts as ``CAP`` (it can only make the median of its side larger).
``DLTRAIN_BENCH_SEARCH_SAMPLERS`` (a JSON list of TPE option dicts) adds sampler variants to the
detail line for comparison; only the DAG's own settings are judged.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

RANDOM_TRIALS = 24
SEEDS = tuple(range(50))
CAP = 96
GRID = 49  # measured learning rates (about 11 per decade over the DAG's space)
TPE_SEED, CONTROL_SEED = 1000, 2000


def _settings() -> tuple[dict[str, Any], dict[str, Any]]:
    from airflow_provider_dltrain.demo.search_settings import FIXED, PARALLEL_TRIALS, TPE

    return dict(TPE["optuna"]), {**FIXED, "parallel": PARALLEL_TRIALS}


@functools.cache
def _data() -> tuple[Any, Any, Any, Any]:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor((digits.data / 16.0).astype("float32"))
    y = torch.tensor(digits.target.astype("int64"))
    order = torch.tensor(np.random.default_rng(0).permutation(len(y)))
    cut = int(0.8 * len(y))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def _val_loss(lr: float, epochs: int, batch_size: int) -> float:
    """Validation loss of one model trained the plain way (the reference the batched trainer must match)."""
    import torch
    import torch.nn.functional as F

    from airflow_provider_dltrain.demo.digits_model import DigitsNet

    x, y, vx, vy = _data()
    torch.manual_seed(0)
    model = DigitsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=generator).split(batch_size):
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
    with torch.no_grad():
        return float(F.cross_entropy(model(vx), vy))


@functools.cache
def _curve(
    low: float, high: float, epochs: int, batch_size: int
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``_val_loss`` at ``GRID`` learning rates evenly spaced in log scale over ``[low, high]``."""
    logs = [math.log(low) + i * (math.log(high) - math.log(low)) / (GRID - 1) for i in range(GRID)]
    return tuple(logs), tuple(_val_loss(math.exp(x), epochs, batch_size) for x in logs)


def _objective(curve: tuple[Sequence[float], Sequence[float]], lr: float) -> float:
    """The measured curve at ``lr``, linear in log(lr) between two measured points."""
    logs, losses = curve
    x = min(max(math.log(lr), logs[0]), logs[-1])
    i = min(bisect.bisect_right(logs, x), len(logs) - 1)
    share = (x - logs[i - 1]) / (logs[i] - logs[i - 1])
    return losses[i - 1] + share * (losses[i] - losses[i - 1])


def _study(options: dict[str, Any], sampler: dict[str, Any], seed: int) -> tuple[Any, Any]:
    import optuna

    from airflow_provider_dltrain.experiments.optuna_study import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = OptunaSearch.coerce({**options, "seed": seed, "sampler": sampler, "pruner": {"name": "none"}})
    return optuna.create_study(sampler=spec.make_sampler(), direction="minimize"), spec.distributions()


def _trials_to_reach(
    options: dict[str, Any], sampler: dict[str, Any], seed: int, target: float, value: Any, parallel: int
) -> int:
    """Trials a study asks, ``parallel`` at a time (all asked before any is told), until one reaches ``target``."""
    study, dists = _study(options, sampler, seed)
    asked = 0
    while asked < CAP:
        batch = [study.ask(dists) for _ in range(min(parallel, CAP - asked))]
        for offset, trial in enumerate(batch, start=1):
            result = value(float(trial.params["lr"]))
            study.tell(trial, result)
            if result <= target + 1e-12:
                return asked + offset
        asked += len(batch)
    return CAP


def _best_of_random(options: dict[str, Any], seed: int, value: Any) -> float:
    study, dists = _study(options, {"name": "random"}, seed)
    return min(value(float(study.ask(dists).params["lr"])) for _ in range(RANDOM_TRIALS))


def _variants(default: dict[str, Any]) -> list[dict[str, Any]]:
    extra = json.loads(os.environ.get("DLTRAIN_BENCH_SEARCH_SAMPLERS", "[]"))
    return [default, *({"name": "tpe", **v} for v in extra)]


def run() -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    options, fixed = _settings()
    ((_, (low, high)),) = options["space"]["lr"].items()
    curve = _curve(float(low), float(high), fixed["epochs"], fixed["batch_size"])
    measured = time.perf_counter() - started
    value = functools.partial(_objective, curve)
    targets = {s: _best_of_random(options, s, value) for s in SEEDS}
    random = {"name": "random"}
    control = {s: _trials_to_reach(options, random, CONTROL_SEED + s, targets[s], value, 1) for s in SEEDS}
    control_median = statistics.median(control.values())
    medians = {}
    for sampler in _variants(dict(options["sampler"])):
        tpe = {
            s: _trials_to_reach(options, sampler, TPE_SEED + s, targets[s], value, fixed["parallel"])
            for s in SEEDS
        }
        medians[json.dumps(sampler, sort_keys=True)] = (statistics.median(tpe.values()), tpe)
    (dag_sampler, (tpe_median, tpe)), *others = medians.items()
    compared = "".join(f"; variant {k}: median {m} ({m / control_median:.2f})" for k, (m, _) in others)
    return [
        {
            "name": "search: median trials to reach random's best of 24, TPE / random",
            "ratio": tpe_median / control_median,
            "goal": "<= 0.6",
            "detail": (
                f"TPE median {tpe_median} trials, random median {control_median} ({len(SEEDS)} seeds, cap {CAP}; "
                f"capped: TPE {sum(v == CAP for v in tpe.values())}, random {sum(v == CAP for v in control.values())}); "
                f"TPE per seed {[tpe[s] for s in SEEDS]}; random per seed {[control[s] for s in SEEDS]}; "
                f"the DAG's sampler {dag_sampler}{compared}; curve of {GRID} trainings {measured:.0f}s, "
                f"best {min(curve[1]):.4f} at lr {math.exp(curve[0][curve[1].index(min(curve[1]))]):.2g}; "
                f"{time.perf_counter() - started:.0f}s"
            ),
        }
    ]
