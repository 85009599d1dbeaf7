"""NaN is a failure: a non-finite training metric fails the run and keeps its model out of MLflow.

``non_finite`` (on ``run_training`` and ``TrainModelOperator``) says what rank 0 - the rank whose
metrics are reported - checks:

- ``"fail_at_end"`` (default): the final value of every metric (what ``train`` returns, and the
  last value logged for each name) must be finite; a NaN at an earlier step that later recovers is
  recorded in the ``dltrain.non_finite`` tag only.
- ``"fail_at_any_step"``: every value given to ``ctx.log_metrics`` must be finite; the first that is
  not fails the run at that step.
- ``"allow"``: nothing is checked; a run that saw a non-finite value is tagged ``dltrain.non_finite``
  (the tag is copied to the model version it registers).

Unless allowed, ``ctx.save_model`` also refuses a model whose current metrics or parameters are not
finite, so such a model is never logged. The switch is not part of a run's identity (params hash,
code hash): it decides whether an outcome is accepted, not what is trained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import NonFiniteError
from airflow_provider_dltrain.utils.non_finite import (
    ALLOW,
    FAIL_AT_ANY_STEP,
    check_mode,
)

TAG = "dltrain.non_finite"
_HOW_TO_ALLOW = (
    "Lower the learning rate, clip gradients or guard the loss (log of 0, division by an empty batch); "
    f"to keep such a model anyway pass non_finite={ALLOW!r} to run_training or TrainModelOperator."
)


def first_non_finite(metrics: Mapping[str, float]) -> tuple[str, float] | None:
    """The first ``(name, value)`` (in name order) that is NaN or infinite, or ``None``."""
    for name in sorted(metrics):
        value = float(metrics[name])
        if not math.isfinite(value):
            return name, value
    return None


def _at(step: int | None) -> str:
    return f"step {step}" if step is not None else "a log_metrics call without a step"


class FiniteGuard:
    """Rank 0's judge of the numbers the training function reports (see the module docstring)."""

    def __init__(self, mode: str) -> None:
        self.mode = check_mode(mode)
        self.steps: dict[str, int | None] = {}  # the step each metric was last logged at
        self.seen: dict[str, Any] | None = None  # the first non-finite value, for the run's tag

    def _note(self, name: str, value: float, where: str) -> None:
        if self.seen is None:
            self.seen = {"metric": name, "value": str(value), "where": where}

    def logged(self, values: Mapping[str, float], step: int | None) -> None:
        """``ctx.log_metrics(values, step)`` on rank 0 (after they were recorded)."""
        self.steps.update(dict.fromkeys(values, step))
        found = first_non_finite(values)
        if found is None:
            return
        name, value = found
        self._note(name, value, _at(step))
        if self.mode == FAIL_AT_ANY_STEP:
            raise NonFiniteError(
                f"metric {name!r} is {value} at {_at(step)} (rank 0; non_finite={self.mode!r} fails at the "
                f"first non-finite value logged). The model was not logged. {_HOW_TO_ALLOW}"
            )

    def before_save(self, latest: Mapping[str, float], model: Any) -> None:
        """Refuse to log ``model`` while a metric's latest value or a parameter is not finite."""
        if self.mode == ALLOW:
            return
        found = first_non_finite(latest)
        if found is not None:
            name, value = found
            raise NonFiniteError(
                f"ctx.save_model refused: metric {name!r} is {value} (last logged at "
                f"{_at(self.steps.get(name))}, rank 0), so the model was not logged. {_HOW_TO_ALLOW}"
            )
        bad = non_finite_parameter(model)
        if bad is not None:
            name, count = bad
            raise NonFiniteError(
                f"ctx.save_model refused: parameter {name!r} of the model holds {count} NaN or infinite "
                f"value(s) (the training diverged), so the model was not logged. {_HOW_TO_ALLOW}"
            )

    def final(self, returned: Mapping[str, float], latest: Mapping[str, float]) -> None:
        """The end of ``train``: what it returned, then each metric's last logged value."""
        found = first_non_finite(returned)
        where = "the end (returned by the training function)"
        if found is None:
            found = first_non_finite(latest)
            where = f"the end (last logged at {_at(self.steps.get(found[0]))})" if found else where
        if found is None:
            return
        name, value = found
        self._note(name, value, where)
        if self.mode != ALLOW:
            raise NonFiniteError(f"metric {name!r} is {value} at {where}, rank 0. {_HOW_TO_ALLOW}")


def non_finite_parameter(model: Any) -> tuple[str, int] | None:
    """``(name, count)`` of the first floating-point parameter holding NaN or infinite values, or ``None``.

    Parameters only: buffers may hold ``-inf`` on purpose (attention masks).
    """
    import torch

    for name, param in model.named_parameters():
        if param.is_floating_point():
            count = int((~torch.isfinite(param.detach())).sum())
            if count:
                return name, count
    return None


def check_report(report: Mapping[str, Any], mode: str) -> None:
    """The launcher's check of rank 0's report: its final metrics must be finite unless allowed.

    Ranks check first (and keep the model out of MLflow); this covers any backend whose report
    reaches the launcher, remote jobs included.
    """
    if check_mode(mode) == ALLOW:
        return
    found = first_non_finite(report.get("metrics") or {})
    if found is not None:
        name, value = found
        raise NonFiniteError(
            f"metric {name!r} is {value} in the training job's final metrics. {_HOW_TO_ALLOW}"
        )


def report_tags(report: Mapping[str, Any], mode: str) -> dict[str, str]:
    """``{dltrain.non_finite: ...}`` when rank 0 saw a non-finite value that the run got past."""
    seen = report.get("non_finite")
    if not seen:
        return {}
    outcome = f"allowed by non_finite={ALLOW!r}" if mode == ALLOW else "the final values were finite"
    return {TAG: f"{seen['metric']}={seen['value']} at {seen['where']}; {outcome}"}
