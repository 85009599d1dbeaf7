"""The promotion gate: does a candidate's metric beat the champion's by the declared margin?

The default gate (``GateSpec(metric, mode, min_delta)``) promotes a positive improvement of at least
``min_delta`` and never a tie. Policies add an absolute floor or ceiling, MLflow's absolute and
relative thresholds (decided as MLflow >= 3.17's ``MetricThreshold`` decides them, float for float),
a tie policy and secondary metrics; each decision's ``decided_by`` (and its reason) names the rule
that decided it. Every reason states improvements and margins in the metric's own unit.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from airflow_provider_dltrain.store.models import (
    TAG_METRIC_PREFIX,
    GateDecision,
    GateSpec,
    ModelVersionInfo,
    SecondaryMetric,
)

Secondary = Mapping[str, tuple[float | None, float | None]]  # metric -> (candidate, champion)


def evaluate_gate(
    gate: GateSpec,
    candidate_value: float,
    champion_value: float | None,
    champion_version: int | None = None,
    *,
    secondary: Secondary | None = None,
    candidate_cutoff: str | None = None,
    champion_cutoff: str | None = None,
) -> GateDecision:
    """Pass or refuse ``candidate_value`` against the champion's value under ``gate``; say why.

    Rules in the order they apply (``decided_by`` names the one that decided):

    - ``finite``: a non-finite candidate value is refused (even with no champion);
    - ``min_value`` / ``max_value``: a candidate outside the absolute bounds is refused;
    - ``no_champion``: no champion (``champion_version`` and ``champion_value`` both None): pass;
    - ``champion_metric``: a champion without the metric: refuse (the reason says what to do);
    - ``improvement``: the improvement (``champion - candidate`` for ``min``, the reverse for
      ``max``) must be positive. With a policy for ties, a tie goes to the ``tiebreak``
      secondaries in order (``tiebreak:<metric>``), then to ``ties`` (``"reject"``: never passes;
      ``"later_cutoff"``: passes when ``candidate_cutoff`` is later than ``champion_cutoff``);
    - ``min_delta``: a positive improvement smaller than it is refused;
    - ``min_absolute_change``, ``min_relative_change``: the candidate must meet MLflow's
      ``MetricThreshold`` of the same name (:func:`metric_threshold_failure`);
    - ``no_regress:<metric>``: a passing candidate whose secondary metric is worse than the
      champion's by more than its ``max_regression`` is refused.

    :param secondary: ``{metric: (candidate value, champion value)}`` of ``gate.secondary``.
    """
    metric, cand = gate.metric, float(candidate_value)
    label = f"champion v{champion_version}" if champion_version is not None else "the champion"
    if not math.isfinite(cand):  # first, so a diverged first model never becomes champion
        reason = f"candidate {metric}={cand} is not a finite number"
        return _refuse(reason, cand, champion_value, champion_version, "finite")
    bound = _outside_bounds(gate, cand)
    if bound is not None:
        return _refuse(bound[1], cand, champion_value, champion_version, bound[0])
    if champion_version is None and champion_value is None:
        reason = f"no champion to compare with; {metric}={cand:.6g}"
        return GateDecision(True, reason, cand, None, None, "no_champion")
    if champion_value is None:
        reason = (
            f"{label} has no {metric!r} recorded, so the candidate cannot be compared; log {metric!r} "
            f"on the champion's run or move the alias by hand"
        )
        return _refuse(reason, cand, None, champion_version, "champion_metric")
    champ = float(champion_value)
    if not math.isfinite(champ):
        reason = f"{label} has {metric}={champ}; any finite value beats it"
        return GateDecision(True, reason, cand, champ, champion_version, "improvement")
    cutoffs = (candidate_cutoff, champion_cutoff)
    passed, reason, rule = _compare(gate, cand, champ, label, cutoffs, secondary or {})
    if passed:
        regressed = _regression(gate, secondary or {}, label)
        if regressed is not None:
            passed, reason, rule = False, f"{reason}, but {regressed[1]}", regressed[0]
    return GateDecision(passed, reason, cand, champ, champion_version, rule)


def _outside_bounds(gate: GateSpec, cand: float) -> tuple[str, str] | None:
    if gate.min_value is not None and cand < gate.min_value:
        return "min_value", f"{gate.metric}={cand:.6g} is below min_value {gate.min_value:g}"
    if gate.max_value is not None and cand > gate.max_value:
        return "max_value", f"{gate.metric}={cand:.6g} is above max_value {gate.max_value:g}"
    return None


def _tolerance(*values: float) -> float:
    # Absorb float noise so that e.g. 0.5 -> 0.4 counts as an improvement of 0.1.
    return 1e-9 * max(1.0, *(abs(v) for v in values))


def _compare(
    gate: GateSpec,
    cand: float,
    champ: float,
    label: str,
    cutoffs: tuple[str | None, str | None],
    secondary: Secondary,
) -> tuple[bool, str, str]:
    """(passed, reason, rule) of the gate metric's comparison: improvement, ties and thresholds."""
    improvement = champ - cand if gate.mode == "min" else cand - champ
    tolerance = _tolerance(champ, cand)
    compared = f"{gate.metric}={cand:.6g} vs {label} {champ:.6g} (mode={gate.mode}"
    if abs(improvement) <= tolerance and (gate.ties != "reject" or _tiebreakers(gate)):
        return _tie(gate, f"{compared}): a tie", cutoffs, secondary)
    if improvement <= tolerance:
        return False, f"{compared}): not better", "improvement"
    if improvement + tolerance < gate.min_delta:
        reason = f"{compared}): improves by {improvement:.6g} < min_delta {gate.min_delta:g}"
        return False, reason, "min_delta"
    failed = metric_threshold_failure(gate, cand, champ)
    if failed is not None:
        reason = f"{compared}): {_margin(gate, failed, champ, improvement)}"
        return False, reason, failed
    if gate.min_absolute_change is None and gate.min_relative_change is None:
        reason = f"{compared}): improves by {improvement:.6g} >= min_delta {gate.min_delta:g}"
        return True, reason, "min_delta" if gate.min_delta > 0 else "improvement"
    return (
        True,
        f"{compared}): improves by {improvement:.6g}, meeting {_thresholds(gate, champ)}",
        "thresholds",
    )


# MLflow's fallback margin for a relative threshold against a zero baseline
ZERO_CHAMPION_MARGIN = 1e-10


def metric_threshold_failure(gate: GateSpec, cand: float, champ: float) -> str | None:
    """The first of ``min_absolute_change`` / ``min_relative_change`` the candidate fails, or None.

    The arithmetic of MLflow's ``_validate`` (MLflow >= 3.17), so the same values give the same
    answer, float rounding included: absolute, ``cand >= champ + x`` (``<= champ - x`` when lower is
    better) compared as exact decimals; relative, ``(cand - champ) / |champ|`` (``(champ - cand) /
    |champ|``) must not be below ``x``; a zero champion falls back to ``cand >= 0 + 1e-10``
    (``<= 0 - 1e-10``), as MLflow does. MLflow before 3.17 divided by the signed champion, which
    reverses the relative check for a negative one.
    """
    greater = gate.mode == "max"
    at_least = operator.ge if greater else operator.le
    shift = operator.add if greater else operator.sub
    absolute, relative = gate.min_absolute_change, gate.min_relative_change
    if absolute is not None and not at_least(Decimal(cand), Decimal(shift(champ, absolute))):
        return "min_absolute_change"
    if relative is None:
        return None
    if champ == 0:
        better = at_least(Decimal(cand), Decimal(shift(champ, ZERO_CHAMPION_MARGIN)))
        return None if better else "min_relative_change"
    change = ((cand - champ) if greater else (champ - cand)) / abs(champ)
    return "min_relative_change" if change < relative else None


def _margin(gate: GateSpec, rule: str, champ: float, improvement: float | None = None) -> str:
    """The improvement ``rule`` asks for, in the metric's unit, and where that number comes from.

    With ``improvement`` (a refusal): ``"<improvement> < <margin> (...)"``, both with every digit
    when six would print them equal (a float just below the margin, which MLflow refuses too).
    """
    if rule == "min_absolute_change":
        needed, source = float(gate.min_absolute_change or 0.0), "min_absolute_change"
    elif champ == 0:
        needed, source = (
            ZERO_CHAMPION_MARGIN,
            "min_relative_change against a zero champion: MLflow's fallback",
        )
    else:
        relative = float(gate.min_relative_change or 0.0)
        needed, source = relative * abs(champ), f"min_relative_change {relative:g} x |{champ:.6g}|"
    if improvement is None:
        return f"{needed:.6g} ({source})"
    shown, margin = f"{improvement:.6g}", f"{needed:.6g}"
    if shown == margin:
        shown, margin = repr(improvement), repr(needed)
    return f"improves by {shown} < {margin} ({source})"


def _thresholds(gate: GateSpec, champ: float) -> str:
    parts = [f"min_delta {gate.min_delta:g}"] if gate.min_delta > 0 else []
    if gate.min_absolute_change is not None:
        parts.append(_margin(gate, "min_absolute_change", champ))
    if gate.min_relative_change is not None:
        parts.append(_margin(gate, "min_relative_change", champ))
    return " and ".join(parts)


def _tiebreakers(gate: GateSpec) -> list[SecondaryMetric]:
    return [s for s in gate.secondary if s.role == "tiebreak"]


def _tie(
    gate: GateSpec, compared: str, cutoffs: tuple[str | None, str | None], secondary: Secondary
) -> tuple[bool, str, str]:
    """A tie on the gate metric: the tiebreak secondaries in order, then the tie policy."""
    for second in _tiebreakers(gate):
        cand, champ = secondary.get(second.metric, (None, None))
        if cand is None or champ is None or not (math.isfinite(cand) and math.isfinite(champ)):
            compared += f"; tiebreak {second.metric} is not comparable ({cand} vs {champ})"
            continue
        gain = champ - cand if second.mode == "min" else cand - champ
        if abs(gain) <= _tolerance(cand, champ):
            compared += f"; tiebreak {second.metric} ties too ({cand:.6g})"
            continue
        verdict = "better" if gain > 0 else "worse"
        reason = f"{compared}; tiebreak {second.metric}={cand:.6g} vs {champ:.6g} (mode={second.mode}) is {verdict}"
        return gain > 0, reason, f"tiebreak:{second.metric}"
    cand_cutoff, champ_cutoff = cutoffs
    if gate.ties == "later_cutoff":
        later = bool(cand_cutoff and champ_cutoff and cand_cutoff > champ_cutoff)
        verdict = "is later than" if later else "is not later than"
        reason = f"{compared}; data cut-off {cand_cutoff} {verdict} the champion's {champ_cutoff} (ties='later_cutoff')"
        return later, reason, "ties"
    return False, f"{compared}; ties='reject' never promotes a tie", "ties"


def _regression(gate: GateSpec, secondary: Secondary, label: str) -> tuple[str, str] | None:
    """(rule, why) of the first ``no_regress`` secondary the candidate makes worse, or None."""
    for second in gate.secondary:
        if second.role != "no_regress":
            continue
        rule = f"no_regress:{second.metric}"
        cand, champ = secondary.get(second.metric, (None, None))
        if cand is None or champ is None:
            return rule, (
                f"{second.metric} (no_regress) is not known for both (candidate {cand}, {label} {champ}): "
                f"log {second.metric!r} on both runs or drop it from secondary"
            )
        worse = cand - champ if second.mode == "min" else champ - cand
        if not math.isfinite(cand) or worse > second.max_regression + _tolerance(cand, champ):
            return rule, (
                f"{second.metric}={cand:.6g} regresses from {label}'s {champ:.6g} (mode={second.mode}) by "
                f"more than max_regression {second.max_regression:g} (no_regress)"
            )
    return None


def _refuse(reason: str, cand: float, champ: float | None, version: int | None, rule: str) -> GateDecision:
    return GateDecision(False, reason, cand, champ, version, rule)


def recorded_metric(client: Any, mv: ModelVersionInfo, metric: str) -> float | None:
    """``metric`` of a version: its ``dltrain.metric.<metric>`` tag, else its run's last value."""
    tagged = mv.tags.get(TAG_METRIC_PREFIX + metric)
    if tagged is not None:
        try:
            return float(tagged)
        except ValueError:
            pass
    if not mv.run_id:
        return None
    try:
        run = client.get_run(mv.run_id)
    except Exception as err:  # a deleted run leaves the version without a comparable value
        if getattr(err, "error_code", None) == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    value = run.data.metrics.get(metric)
    return None if value is None else float(value)
