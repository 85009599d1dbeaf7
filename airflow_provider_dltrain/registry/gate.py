"""The promotion gate: does a candidate's metric beat the champion's by the declared margin?"""

from __future__ import annotations

import math
from typing import Any

from airflow_provider_dltrain.registry.models import (
    TAG_METRIC_PREFIX,
    GateDecision,
    GateSpec,
    ModelVersionInfo,
)


def evaluate_gate(
    gate: GateSpec,
    candidate_value: float,
    champion_value: float | None,
    champion_version: int | None = None,
) -> GateDecision:
    """Pass or refuse ``candidate_value`` against the champion's value under ``gate``; say why.

    - a non-finite candidate value: refuse (even with no champion);
    - no champion (``champion_version`` and ``champion_value`` both None): pass;
    - a champion without the metric: refuse (comparing is impossible; the reason says what to do);
    - otherwise pass iff the improvement (``champion - candidate`` for ``min``, the reverse for
      ``max``) is positive and at least ``min_delta``. A tie never passes.
    """
    metric, cand = gate.metric, float(candidate_value)
    label = f"champion v{champion_version}" if champion_version is not None else "the champion"
    if not math.isfinite(cand):  # first, so a diverged first model never becomes champion
        reason = f"candidate {metric}={cand} is not a finite number"
        return _refuse(reason, cand, champion_value, champion_version)
    if champion_version is None and champion_value is None:
        return GateDecision(True, f"no champion to compare with; {metric}={cand:.6g}", cand, None, None)
    if champion_value is None:
        reason = (
            f"{label} has no {metric!r} recorded, so the candidate cannot be compared; log {metric!r} "
            f"on the champion's run or move the alias by hand"
        )
        return _refuse(reason, cand, None, champion_version)
    champ = float(champion_value)
    if not math.isfinite(champ):
        return GateDecision(
            True, f"{label} has {metric}={champ}; any finite value beats it", cand, champ, champion_version
        )
    improvement = champ - cand if gate.mode == "min" else cand - champ
    # Absorb float noise so that e.g. 0.5 -> 0.4 counts as an improvement of 0.1.
    tolerance = 1e-9 * max(1.0, abs(champ), abs(cand))
    compared = f"{metric}={cand:.6g} vs {label} {champ:.6g} (mode={gate.mode}"
    if improvement <= tolerance:
        return _refuse(f"{compared}): not better", cand, champ, champion_version)
    if improvement + tolerance < gate.min_delta:
        reason = f"{compared}): improves by {improvement:.6g} < min_delta {gate.min_delta:g}"
        return _refuse(reason, cand, champ, champion_version)
    reason = f"{compared}): improves by {improvement:.6g} >= min_delta {gate.min_delta:g}"
    return GateDecision(True, reason, cand, champ, champion_version)


def _refuse(reason: str, cand: float, champ: float | None, version: int | None) -> GateDecision:
    return GateDecision(False, reason, cand, champ, version)


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
