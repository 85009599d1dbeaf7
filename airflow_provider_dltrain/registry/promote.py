"""Register, gate and promote: the registry step of a (re)training run, safe to run twice."""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry.client import (
    alias_holder,
    check_name,
    delete_tags,
    get_version,
    mlflow_client,
    set_tags,
)
from airflow_provider_dltrain.registry.gate import evaluate_gate, recorded_metric
from airflow_provider_dltrain.registry.history import champion_as_of, settle_alias
from airflow_provider_dltrain.registry.models import (
    DEFAULT_ALIAS,
    TAG_CANDIDATE_VALUE,
    TAG_CHAMPION_VALUE,
    TAG_COMPARED_WITH,
    TAG_DATA_CUTOFF,
    TAG_DECISION,
    TAG_GATE_ALIAS,
    TAG_GATE_CUTOFF,
    TAG_GATE_RULE,
    TAG_REASON,
    GateDecision,
    GateSpec,
    ModelVersionInfo,
    PromotionResult,
    history_tags,
    normalize_date,
)
from airflow_provider_dltrain.registry.register import register_model

log = logging.getLogger(__name__)


def gate_and_promote(
    tracking: Any,
    *,
    model_name: str,
    version: int | str,
    gate: GateSpec,
    data_cutoff: Any,
    alias: str = DEFAULT_ALIAS,
) -> PromotionResult:
    """Compare a version with the champion for ``data_cutoff``; record why; promote if it passes.

    Passing makes the version champion for ``data_cutoff`` onwards (history tags) and moves the live
    ``alias`` only if no promotion for a later cut-off exists. The decision is recorded as version
    tags (``dltrain.gate.*``, decision last); calling again with the same gate replays the recorded
    decision instead of comparing the version with itself.
    """
    client = mlflow_client(tracking)
    check_name(alias, "alias")
    cutoff = normalize_date(data_cutoff, "data_cutoff")
    mv = get_version(client, model_name, version)
    if _decided(mv, alias, cutoff, gate):
        log.info(
            "%s v%s was already gated for cut-off %s; replaying the recorded decision.",
            model_name,
            mv.version,
            cutoff,
        )
        return _finish(client, mv, alias, cutoff)
    champion = champion_as_of(client, model_name, cutoff, alias, exclude_version=mv.version)
    candidate_value = recorded_metric(client, mv, gate.metric)
    if candidate_value is None:
        raise InvalidSpecError(
            f"{model_name} v{mv.version} has no metric {gate.metric!r} (no version tag, not on run "
            f"{mv.run_id}): log it during training or gate on a metric the run reports."
        )
    champion_value = recorded_metric(client, champion, gate.metric) if champion else None
    decision = evaluate_gate(gate, candidate_value, champion_value, champion.version if champion else None)
    _record(client, mv, alias, cutoff, gate, decision)
    return _finish(client, get_version(client, model_name, mv.version), alias, cutoff)


def register_and_promote(
    tracking: Any,
    *,
    model_name: str,
    model_uri: str,
    gate: GateSpec,
    run_id: str | None = None,
    metrics: dict[str, float] | None = None,
    data_cutoff: Any = None,
    alias: str = DEFAULT_ALIAS,
    registration_key: str | None = None,
) -> PromotionResult:
    """Register the run's model once, then gate and promote it (see :func:`gate_and_promote`).

    Everything that can be checked is checked before anything is written: the gate metric must be
    in ``metrics`` (when given) and the data cut-off must be known (``data_cutoff`` or the run's
    ``dltrain.data_cutoff`` tag).
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    check_name(alias, "alias")
    if metrics is not None and gate.metric not in metrics:
        raise InvalidSpecError(
            f"metric {gate.metric!r} is not in the training result's metrics {sorted(metrics)}: "
            f"set metric= to one of them or log {gate.metric!r} in the training function."
        )
    cutoff = normalize_date(data_cutoff or _run_cutoff(client, run_id), "data_cutoff")
    mv = register_model(
        client,
        model_name=model_name,
        model_uri=model_uri,
        run_id=run_id,
        metrics=metrics,
        registration_key=registration_key,
    )
    return gate_and_promote(
        client, model_name=model_name, version=mv.version, gate=gate, data_cutoff=cutoff, alias=alias
    )


def _run_cutoff(client: Any, run_id: str | None) -> str:
    cutoff = client.get_run(run_id).data.tags.get(TAG_DATA_CUTOFF) if run_id else None
    if not cutoff:
        raise InvalidSpecError(
            f"data_cutoff is not set and run {run_id} has no {TAG_DATA_CUTOFF!r} tag: pass "
            "data_cutoff='YYYY-MM-DD' (e.g. '{{ ds }}')."
        )
    return str(cutoff)


def _decided(mv: ModelVersionInfo, alias: str, cutoff: str, gate: GateSpec) -> bool:
    tags = mv.tags
    return (
        tags.get(TAG_DECISION) in ("promoted", "rejected")
        and tags.get(TAG_GATE_ALIAS) == alias
        and tags.get(TAG_GATE_CUTOFF) == cutoff
        and tags.get(TAG_GATE_RULE) == gate.rule
    )


def _record(
    client: Any, mv: ModelVersionInfo, alias: str, cutoff: str, gate: GateSpec, decision: GateDecision
) -> None:
    """History tags first, the decision tag last: a crash in between leaves no decision to replay."""
    from_tag, at_tag = history_tags(alias)
    if decision.passed:
        set_tags(client, mv.name, mv.version, {from_tag: cutoff, at_tag: str(int(time.time() * 1000))})
    else:
        delete_tags(client, mv, (from_tag, at_tag))
    set_tags(
        client,
        mv.name,
        mv.version,
        {
            TAG_GATE_ALIAS: alias,
            TAG_GATE_CUTOFF: cutoff,
            TAG_GATE_RULE: gate.rule,
            TAG_CANDIDATE_VALUE: _text(decision.candidate_value),
            TAG_CHAMPION_VALUE: _text(decision.champion_value),
            TAG_COMPARED_WITH: _text(decision.champion_version),
            TAG_REASON: decision.reason[:4000],
            TAG_DECISION: "promoted" if decision.passed else "rejected",
        },
    )


def _finish(client: Any, mv: ModelVersionInfo, alias: str, cutoff: str) -> PromotionResult:
    """Settle the live alias for a decided version and describe the outcome."""
    promoted = mv.tags.get(TAG_DECISION) == "promoted"
    holder = settle_alias(client, mv.name, alias, mv) if promoted else alias_holder(client, mv.name, alias)
    holds = holder is not None and holder.version == mv.version
    reason = mv.tags.get(TAG_REASON, "")
    if promoted and not holds and holder is not None:
        reason += (
            f"; champion for cut-off {cutoff} onwards, but alias {alias!r} stays on v{holder.version} "
            "(a later cut-off was promoted)"
        )
    champion_now = champion_as_of(client, mv.name, cutoff, alias)
    compared = mv.tags.get(TAG_COMPARED_WITH)
    return PromotionResult(
        name=mv.name,
        version=mv.version,
        data_cutoff=cutoff,
        promoted=promoted,
        reason=reason,
        alias=alias,
        holds_alias=holds,
        compared_with=int(compared) if compared else None,
        champion_version=champion_now.version if champion_now else None,
    )


def _text(value: Any) -> str:
    return "" if value is None else (repr(value) if isinstance(value, float) else str(value))
