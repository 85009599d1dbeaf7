"""Asynchronous early stopping: a trial is compared with the other trials *at the same step*.

The other trials' histories are read from the tracking store (the child runs of the search's parent
run), so trials on other workers or machines count, and a trial that starts later sees what the
earlier ones logged - there is no barrier between trials. Two rules:

- **median** (Google Vizier's median stopping rule): at step ``s >= grace_steps`` stop when this
  trial's best value so far is worse than the median of the other trials' running averages up to
  ``s``, among the ``>= min_trials`` others that reached ``s``.
- **asha** (asynchronous successive halving, Li et al. 2020): rungs at ``min_steps * eta**k`` steps
  completed; at a rung a trial continues only if it is in the top ``1/eta`` of all values recorded
  at that rung so far (itself included).

In an Optuna search (``search={"optuna": ...}``) the rule is ``optuna``: the study's own pruner
(median, successive halving or Hyperband, see :mod:`.optuna_study`) judges each reported step from
the intermediate values in the study, instead of these hand-written rules.

Decisions depend on what the other trials had logged when the question was asked, so the set of
stopped trials can differ between two runs of the same search (each trial alone stays reproducible).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dltrain.exceptions import InvalidSpecError

if TYPE_CHECKING:
    from airflow_provider_dltrain.experiments.optuna_study import OptunaPruneRule
    from airflow_provider_dltrain.store.config import TrackingConfig

log = logging.getLogger("airflow_provider_dltrain.experiments")

History = Mapping[int, float]  # step -> value of one trial's metric
TRIAL_TAG = "dltrain.trial"
PARENT_TAG = "mlflow.parentRunId"


@dataclass(frozen=True)
class StoppingSpec:
    """Which rule stops trials, on which metric. JSON: ``{"rule": "median", "metric": "val_loss"}``.

    :param rule: ``"median"``, ``"asha"`` or ``"optuna"`` (set by an Optuna search, with
        ``pruner``, ``storage``, ``study`` and the task's ``trial_number``).
    :param metric: a metric the training function logs with ``ctx.log_metrics(..., step=...)``.
    :param mode: ``"min"`` (lower is better) or ``"max"``.
    :param grace_steps: median: never stop before this step index.
    :param min_trials: median: other trials that must have reached the step before comparing.
    :param min_steps: asha: steps completed at the first rung.
    :param reduction_factor: asha: ``eta``; the top ``1/eta`` continue at each rung.
    """

    rule: Literal["median", "asha", "optuna"]
    metric: str
    mode: Literal["min", "max"] = "min"
    grace_steps: int = 1
    min_trials: int = 2
    min_steps: int = 1
    reduction_factor: int = 3
    pruner: Mapping[str, Any] | None = None
    storage: str | None = None
    study: str | None = None
    trial_number: int | None = None

    @classmethod
    def coerce(cls, value: StoppingSpec | Mapping[str, Any]) -> StoppingSpec:
        if isinstance(value, StoppingSpec):
            return value
        if not isinstance(value, Mapping):
            raise InvalidSpecError(
                "early_stopping must be a dict like {'rule': 'median', 'metric': 'val_loss'}"
            )
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidSpecError(
                f"early_stopping has unknown keys {unknown}; known: {sorted(cls.__dataclass_fields__)}"
            )
        try:
            spec = cls(**dict(value))
        except TypeError as err:
            raise InvalidSpecError(f"early_stopping needs 'rule' and 'metric': {err}") from err
        spec.check()
        return spec

    def check(self) -> None:
        if self.rule not in ("median", "asha", "optuna"):
            raise InvalidSpecError(f"early_stopping.rule must be 'median' or 'asha', got {self.rule!r}")
        if self.rule == "optuna" and not (self.pruner and self.storage and self.study):
            raise InvalidSpecError(
                "early_stopping.rule 'optuna' is set by an Optuna search: it needs pruner, storage and study"
            )
        if self.mode not in ("min", "max"):
            raise InvalidSpecError(f"early_stopping.mode must be 'min' or 'max', got {self.mode!r}")
        if not self.metric:
            raise InvalidSpecError("early_stopping.metric must name a logged metric")
        if self.min_steps < 1 or self.reduction_factor < 2 or self.min_trials < 1 or self.grace_steps < 0:
            raise InvalidSpecError(
                "early_stopping needs min_steps >= 1, reduction_factor >= 2, min_trials >= 1, grace_steps >= 0"
            )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.rule != "optuna":  # the hand-written rules' dicts stay as they were (search keys)
            for name in ("pruner", "storage", "study", "trial_number"):
                out.pop(name)
        return out

    def rule_object(self) -> MedianStoppingRule | AshaRule | OptunaPruneRule:
        if self.rule == "optuna":
            from airflow_provider_dltrain.experiments.optuna_study import OptunaPruneRule

            return OptunaPruneRule(self.to_dict(), int(self.trial_number or 0))
        if self.rule == "median":
            return MedianStoppingRule(self.mode, self.grace_steps, self.min_trials)
        return AshaRule(self.mode, self.min_steps, self.reduction_factor)


@dataclass(frozen=True)
class StopDecision:
    """A rule's answer at one step; ``reason`` says which numbers decided it."""

    stop: bool
    step: int
    reason: str


def _better(mode: str, a: float, b: float) -> bool:
    return a < b if mode == "min" else a > b


class MedianStoppingRule:
    """Stop a trial whose best value so far is worse than the median of the others' running averages."""

    def __init__(self, mode: str = "min", grace_steps: int = 1, min_trials: int = 2) -> None:
        self.mode, self.grace_steps, self.min_trials = mode, grace_steps, min_trials

    def decide(self, own: History, others: Sequence[History], step: int) -> StopDecision:
        if step < self.grace_steps:
            return StopDecision(False, step, f"step {step} is within the grace period ({self.grace_steps})")
        mine = [v for s, v in own.items() if s <= step]
        if not mine:
            return StopDecision(False, step, "no value of this trial yet")
        best = min(mine) if self.mode == "min" else max(mine)
        averages = [
            statistics.fmean(v for s, v in other.items() if s <= step)
            for other in others
            if other and max(other) >= step
        ]
        if len(averages) < self.min_trials:
            return StopDecision(
                False, step, f"{len(averages)} other trial(s) reached step {step}, {self.min_trials} needed"
            )
        median = statistics.median(averages)
        stop = _better(self.mode, median, best)
        verdict = "worse than" if stop else "not worse than"
        return StopDecision(
            stop,
            step,
            f"best so far {best:.6g} is {verdict} the median {median:.6g} of {len(averages)} other "
            f"trials' running averages at step {step}",
        )


class AshaRule:
    """Asynchronous successive halving: continue at a rung only when in the top ``1/eta`` there."""

    def __init__(self, mode: str = "min", min_steps: int = 1, reduction_factor: int = 3) -> None:
        self.mode, self.min_steps, self.eta = mode, min_steps, reduction_factor

    def is_rung(self, step: int) -> bool:
        """Whether ``step`` (0-based) completes ``min_steps * eta**k`` steps for some k >= 0."""
        done = step + 1
        rung = self.min_steps
        while rung < done:
            rung *= self.eta
        return rung == done

    def decide(self, own: History, others: Sequence[History], step: int) -> StopDecision:
        if not self.is_rung(step) or step not in own:
            return StopDecision(False, step, f"step {step} is not a rung")
        value = own[step]
        recorded = sorted([o[step] for o in others if step in o] + [value], reverse=self.mode == "max")
        keep = max(1, len(recorded) // self.eta)
        cutoff = recorded[keep - 1]
        stop = _better(self.mode, cutoff, value)
        verdict = "outside" if stop else "inside"
        return StopDecision(
            stop,
            step,
            f"{value:.6g} is {verdict} the top {keep} of {len(recorded)} values recorded at the rung of "
            f"step {step} (cut-off {cutoff:.6g}, reduction factor {self.eta})",
        )


def metric_histories(
    config: TrackingConfig, parent_run_id: str, metric: str, exclude_trial: str | None = None
) -> dict[str, dict[int, float]]:
    """``{run_id: {step: value}}`` of ``metric`` for every child run of ``parent_run_id``.

    Runs of ``exclude_trial`` (this trial's own earlier attempts) are left out.
    """
    client = config.client()
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
        max_results=10000,
    )
    out: dict[str, dict[int, float]] = {}
    for run in runs:
        if exclude_trial is not None and run.data.tags.get(TRIAL_TAG) == exclude_trial:
            continue
        history: dict[int, float] = {}
        for point in sorted(client.get_metric_history(run.info.run_id, metric), key=lambda m: m.timestamp):
            history[int(point.step)] = float(point.value)  # the last value logged for a step wins
        out[run.info.run_id] = history
    return out


class TrialStopper:
    """Rank 0's early-stopping judge for one trial: feed it each logged step, ask whether to stop."""

    def __init__(self, spec: StoppingSpec, config: TrackingConfig, parent_run_id: str, trial: str) -> None:
        self.spec, self.config = spec, config
        self.parent_run_id, self.trial = parent_run_id, trial
        self.rule = spec.rule_object()
        self.own: dict[int, float] = {}

    def observe(self, metrics: Mapping[str, float], step: int | None) -> StopDecision | None:
        """The decision after this step's metrics, or None when the step carries no watched metric."""
        if self.spec.metric not in metrics or step is None:
            return None
        self.own[int(step)] = float(metrics[self.spec.metric])
        if not isinstance(self.rule, (MedianStoppingRule, AshaRule)):  # the study's pruner judges
            prune, reason = self.rule.report(self.own[int(step)], int(step))
            decision = StopDecision(prune, int(step), reason)
        else:
            others = list(
                metric_histories(self.config, self.parent_run_id, self.spec.metric, self.trial).values()
            )
            decision = self.rule.decide(self.own, others, int(step))
        log.info(
            "early stopping (%s on %s) for %s at step %d: %s -> %s",
            self.spec.rule,
            self.spec.metric,
            self.trial,
            step,
            decision.reason,
            "STOP" if decision.stop else "continue",
        )
        return decision
