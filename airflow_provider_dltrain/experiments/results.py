"""What a search found: the best trial, a leaderboard, and each ablated component's effect."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.experiments.search_spec import ABLATE


def _value(result: Mapping[str, Any], metric: str) -> float:
    metrics = result.get("metrics") or {}
    if metric not in metrics:
        raise InvalidSpecError(
            f"trial run {result.get('run_id')} has no metric {metric!r} (has {sorted(metrics)}): set metric= "
            "to a metric the training function returns"
        )
    value = float(metrics[metric])
    return value if not math.isnan(value) else (math.inf)


def _order(results: Sequence[Mapping[str, Any]], metric: str, mode: str) -> list[Mapping[str, Any]]:
    if mode not in ("min", "max"):
        raise InvalidSpecError(f"mode must be 'min' or 'max', got {mode!r}")
    sign = 1.0 if mode == "min" else -1.0

    def key(item: tuple[int, Mapping[str, Any]]) -> tuple[float, int]:
        value = _value(item[1], metric)
        return (
            sign * value if not math.isinf(value) else math.inf,
            item[0],
        )  # NaN/inf last; ties: order given

    return [r for _, r in sorted(enumerate(results), key=key)]


def select_best(results: Sequence[Mapping[str, Any]], metric: str, mode: str = "min") -> dict[str, Any]:
    """The TrainResult dict with the best ``metric`` (ties: the earlier trial); trials that were
    skipped (``None``) are ignored."""
    usable = [r for r in results if r]
    if not usable:
        raise InvalidSpecError("no trial produced a result to select from")
    with_model = [r for r in usable if r.get("model_uri")]
    if not with_model:
        raise InvalidSpecError("no trial saved a model (ctx.save_model): nothing to register")
    return dict(_order(with_model, metric, mode)[0])


def leaderboard(results: Sequence[Mapping[str, Any]], metric: str, mode: str = "min") -> list[dict[str, Any]]:
    """One row per trial, best first: trial, run id, metric value, hparams, early stop step."""
    rows: list[dict[str, Any]] = []
    for rank, result in enumerate(_order([r for r in results if r], metric, mode), start=1):
        stopped = result.get("stopped") or {}
        rows.append(
            {
                "rank": rank,
                "trial": result.get("trial"),
                "run_id": result.get("run_id"),
                metric: float((result.get("metrics") or {}).get(metric, math.nan)),
                "stopped_at_step": stopped.get("step"),
                "hparams": dict(result.get("params") or {}),
            }
        )
    return rows


def ablation_report(results: Sequence[Mapping[str, Any]], metric: str, mode: str = "min") -> dict[str, Any]:
    """Each left-out component's effect on ``metric`` against the baseline (all components on).

    ``effect`` is ``ablated - baseline``; ``harm`` is positive when leaving the component out made the
    metric worse (the component helps). Components are listed most helpful first.
    """
    usable = [r for r in results if r]
    baseline = [r for r in usable if (r.get("params") or {}).get(ABLATE) is None]
    if len(baseline) != 1:
        raise InvalidSpecError(
            f"an ablation needs exactly one baseline trial (hparams[{ABLATE!r}] None), found {len(baseline)}"
        )
    base = _value(baseline[0], metric)
    sign = 1.0 if mode == "min" else -1.0
    rows: list[dict[str, Any]] = []
    for result in usable:
        component = (result.get("params") or {}).get(ABLATE)
        if component is None:
            continue
        value = _value(result, metric)
        rows.append(
            {
                "component": str(component),
                metric: value,
                "effect": value - base,
                "harm": sign * (value - base),
                "run_id": result.get("run_id"),
                "stopped_at_step": (result.get("stopped") or {}).get("step"),
            }
        )
    rows.sort(key=lambda r: (-r["harm"], r["component"]))
    return {
        "metric": metric,
        "mode": mode,
        "baseline": base,
        "baseline_run_id": baseline[0].get("run_id"),
        "components": rows,
    }


def ablation_markdown(report: Mapping[str, Any]) -> str:
    """The report as a markdown table (the parent run's ``ablation.md`` artifact)."""
    metric = report["metric"]
    lines = [
        f"# Ablation on {metric} ({'lower' if report['mode'] == 'min' else 'higher'} is better)",
        "",
        f"Baseline (all components): {report['baseline']:.6g}",
        "",
        f"| left out | {metric} | change | verdict |",
        "|---|---|---|---|",
    ]
    for row in report["components"]:
        verdict = "helps" if row["harm"] > 0 else ("hurts" if row["harm"] < 0 else "no effect")
        lines.append(f"| {row['component']} | {row[metric]:.6g} | {row['effect']:+.6g} | {verdict} |")
    return "\n".join(lines) + "\n"
