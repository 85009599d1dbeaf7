"""Adaptive search pays: trials TPE needs to match the best of 24 random trials on the demo data.

The demo's digits CNN (``airflow_provider_dltrain.demo.digits_model.DigitsNet``) on sklearn's digits
(the images the demo ingests), a fixed 80/20 split, 3 epochs, validation loss. The space is the
hyper-parameters the demo's ``train`` reads: learning rate (log scale) and batch size. For each of
3 seeds:

- **random**: 24 trials of the ``random`` sampler (seed ``s``); its best validation loss is the target;
- **TPE**: the ``tpe`` sampler as the search DAG runs it (``constant_liar``, 2 trials at a time,
  built from the same ``OptunaSearch`` spec, seed ``1000 + s``: TPE's random start-up trials must
  not be random's own first draws), until a trial reaches the target (at most 24 trials).

Ratio: the median over seeds of (TPE's trials to reach the target) / 24. Goal <= 0.6. A seed where
TPE never reaches the target counts as 24 trials (ratio 1 for that seed).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

RANDOM_TRIALS = 24
SEEDS = (0, 1, 2)
EPOCHS = 3
SPACE = {"lr": {"loguniform": [1e-5, 1e-1]}, "batch_size": {"choice": [16, 32, 64, 128]}}
TPE_SEED = 1000


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


@functools.cache
def _val_loss(lr: float, batch_size: int) -> float:
    """Validation loss of the demo CNN after ``EPOCHS`` epochs (deterministic: fixed seed)."""
    import torch
    import torch.nn.functional as F

    from airflow_provider_dltrain.demo.digits_model import DigitsNet

    x, y, vx, vy = _data()
    torch.manual_seed(0)
    model = DigitsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(0)
    for _ in range(EPOCHS):
        model.train()
        for idx in torch.randperm(len(y), generator=generator).split(batch_size):
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        return float(F.cross_entropy(model(vx), vy))


def _objective(params: dict[str, Any]) -> float:
    return _val_loss(float(params["lr"]), int(params["batch_size"]))


def _study(sampler: str, seed: int) -> tuple[Any, Any]:
    import optuna

    from airflow_provider_dltrain.experiments.optuna_study import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    options = {"name": sampler, **({"n_startup_trials": 5} if sampler == "tpe" else {})}
    spec = OptunaSearch.coerce(
        {"n_trials": RANDOM_TRIALS, "metric": "val_loss", "space": SPACE, "seed": seed, "sampler": options}
    )
    return optuna.create_study(sampler=spec.make_sampler(), direction="minimize"), spec.distributions()


def _random_best(seed: int) -> float:
    study, dists = _study("random", seed)
    for _ in range(RANDOM_TRIALS):
        trial = study.ask(dists)
        study.tell(trial, _objective(trial.params))
    return float(study.best_value)


def _tpe_trials_to_reach(target: float, seed: int) -> int:
    """Trials TPE asks, two at a time (the second asked while the first runs), until one reaches ``target``."""
    study, dists = _study("tpe", TPE_SEED + seed)
    asked = 0
    while asked < RANDOM_TRIALS:
        pair = [study.ask(dists) for _ in range(2)]
        for offset, trial in enumerate(pair, start=1):
            value = _objective(trial.params)
            study.tell(trial, value)
            if value <= target + 1e-12:
                return asked + offset
        asked += 2
    return RANDOM_TRIALS


def run() -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    per_seed = []
    for seed in SEEDS:
        target = _random_best(seed)
        per_seed.append((seed, target, _tpe_trials_to_reach(target, seed)))
    median = statistics.median(n for _, _, n in per_seed)
    detail = "; ".join(f"seed {s}: random best {t:.4f}, TPE reached it in {n}" for s, t, n in per_seed)
    return [
        {
            "name": "search: TPE trials to reach the best of 24 random (fraction of 24)",
            "ratio": median / RANDOM_TRIALS,
            "goal": "<= 0.6",
            "detail": f"median {median} trials ({detail}; {time.perf_counter() - started:.0f}s)",
        }
    ]
