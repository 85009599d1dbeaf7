"""A search spec (grid, seeded random, explicit list, or leave-one-out ablation) as a list of trials.

Specs are JSON so they can be DAG params or XCom::

    {"grid": {"lr": [0.003, 0.0003], "batch_size": [16, 32]}}
    {"random": {"n": 6, "seed": 7, "space": {"lr": {"loguniform": [1e-4, 1e-2]},
                                             "batch_size": {"choice": [16, 32]}}}}
    {"trials": [{"lr": 0.003}, {"lr": 0.0001}]}
    {"ablate": ["conv2", "pool", "hidden"]}     # a baseline plus one trial without each component

An adaptive search, ``{"optuna": {...}}``, is not a fixed list: its trials are asked from an Optuna
study as they start (see :mod:`airflow_provider_dltrain.experiments.optuna_study`).

The same spec and ``fixed`` hyper-parameters always give the same trials in the same order.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

ABLATE = "ablate"  # the hparam naming the component an ablation trial leaves out (None: the baseline)
KINDS = ("grid", "random", "trials", "ablate")
DISTRIBUTIONS = ("choice", "uniform", "loguniform", "randint")


@dataclass(frozen=True)
class Trial:
    """One configuration of a search: its name (stable across re-runs), index and hyper-parameters."""

    name: str
    index: int
    hparams: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "index": self.index, "hparams": dict(self.hparams)}


def expand_trials(spec: Mapping[str, Any], fixed: Mapping[str, Any] | None = None) -> list[Trial]:
    """The trials of ``spec``, each with ``fixed`` hyper-parameters under its own (a trial's win)."""
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(
            f"search must be a dict such as {{'grid': {{...}}}}, got {type(spec).__name__}"
        )
    if "optuna" in spec:
        raise InvalidSpecError(
            "an Optuna search is asked from its study as trials start, not expanded up front: give it to "
            "ExpandTrialsOperator (or plan_trials in experiments.optuna_study)"
        )
    kinds = [k for k in KINDS if k in spec]
    unknown = sorted(set(spec) - set(KINDS))
    if len(kinds) != 1 or unknown:
        raise InvalidSpecError(f"search needs exactly one of {[*KINDS, 'optuna']}; got keys {sorted(spec)}")
    kind = kinds[0]
    base = dict(fixed or {})
    if kind == "ablate":
        return _ablation(spec[kind], base)
    configs = {"grid": _grid, "random": _random, "trials": _explicit}[kind](spec[kind])
    if not configs:
        raise InvalidSpecError(f"search.{kind} gives no trial: give at least one value")
    width = max(2, len(str(len(configs) - 1)))
    return [Trial(f"trial-{i:0{width}d}", i, {**base, **config}) for i, config in enumerate(configs)]


def _grid(grid: Any) -> list[dict[str, Any]]:
    if not isinstance(grid, Mapping) or not grid:
        raise InvalidSpecError(
            "search.grid must map each hparam to a list of values, e.g. {'lr': [0.1, 0.01]}"
        )
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise InvalidSpecError(f"search.grid.{key} must be a non-empty list of values, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _random(options: Any) -> list[dict[str, Any]]:
    if not isinstance(options, Mapping) or not isinstance(options.get("space"), Mapping):
        raise InvalidSpecError("search.random needs {'n': N, 'seed': S, 'space': {hparam: distribution}}")
    try:
        n, seed = int(options.get("n", 0)), int(options.get("seed", 0))
    except (TypeError, ValueError) as err:
        raise InvalidSpecError(f"search.random.n and .seed must be integers: {err}") from err
    if n < 1:
        raise InvalidSpecError(f"search.random.n must be >= 1, got {options.get('n')!r}")
    rng = random.Random(seed)  # the seed alone decides every draw: same spec, same trials
    space = dict(options["space"])
    return [{key: _draw(rng, key, dist) for key, dist in space.items()} for _ in range(n)]


def _draw(rng: random.Random, key: str, dist: Any) -> Any:
    if not isinstance(dist, Mapping) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        raise InvalidSpecError(
            f"search.random.space.{key} must be one of {{'choice': [...]}}, {{'uniform': [lo, hi]}}, "
            f"{{'loguniform': [lo, hi]}}, {{'randint': [lo, hi]}}; got {dist!r}"
        )
    ((name, args),) = dist.items()
    if name == "choice":
        if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or not args:
            raise InvalidSpecError(f"search.random.space.{key}.choice must be a non-empty list")
        return args[rng.randrange(len(args))]
    if not isinstance(args, Sequence) or len(args) != 2 or not float(args[0]) <= float(args[1]):
        raise InvalidSpecError(f"search.random.space.{key}.{name} must be [low, high] with low <= high")
    low, high = float(args[0]), float(args[1])
    if name == "uniform":
        return rng.uniform(low, high)
    if name == "randint":
        return rng.randint(int(low), int(high))
    if low <= 0:
        raise InvalidSpecError(f"search.random.space.{key}.loguniform needs low > 0, got {low}")
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _explicit(trials: Any) -> list[dict[str, Any]]:
    if isinstance(trials, (str, bytes)) or not isinstance(trials, Sequence):
        raise InvalidSpecError("search.trials must be a list of hparam dicts")
    for i, config in enumerate(trials):
        if not isinstance(config, Mapping):
            raise InvalidSpecError(f"search.trials[{i}] must be a dict of hparams, got {config!r}")
    return [dict(c) for c in trials]


def _ablation(components: Any, base: dict[str, Any]) -> list[Trial]:
    if isinstance(components, (str, bytes)) or not isinstance(components, Sequence) or not components:
        raise InvalidSpecError("search.ablate must be a non-empty list of component names")
    names = [str(c) for c in components]
    if len(set(names)) != len(names):
        raise InvalidSpecError(f"search.ablate lists a component twice: {names}")
    if ABLATE in base:
        raise InvalidSpecError(f"hparams must not set {ABLATE!r} in an ablation: each trial sets it")
    trials = [Trial("baseline", 0, {**base, ABLATE: None})]
    trials += [Trial(f"without-{c}", i, {**base, ABLATE: c}) for i, c in enumerate(names, start=1)]
    return trials
