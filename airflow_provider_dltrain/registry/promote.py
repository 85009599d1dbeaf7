"""Register, gate and promote: the registry step of a (re)training run, safe to run twice."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry.evaluate import GateEvaluation, GateValues, rescore, tracking_config
from airflow_provider_dltrain.registry.register import register_model
from airflow_provider_dltrain.store.champion_history import champion_as_of, settle_alias
from airflow_provider_dltrain.store.client import (
    alias_holder,
    check_alias,
    check_name,
    delete_tags,
    get_version,
    mlflow_client,
    set_tags,
)
from airflow_provider_dltrain.store.gate import evaluate_gate, recorded_metric
from airflow_provider_dltrain.store.models import (
    BASIS_RECORDED,
    DEFAULT_ALIAS,
    TAG_CANDIDATE_VALUE,
    TAG_CHAMPION_CUTOFF,
    TAG_CHAMPION_VALUE,
    TAG_COMPARED_WITH,
    TAG_DATA_CUTOFF,
    TAG_DECISION,
    TAG_EVAL_DATA,
    TAG_EVAL_FN,
    TAG_EVAL_ROWS,
    TAG_GATE_ALIAS,
    TAG_GATE_BASIS,
    TAG_GATE_CUTOFF,
    TAG_GATE_RULE,
    TAG_HPARAMS,
    TAG_REASON,
    TAG_SECONDARY_VALUES,
    GateDecision,
    GateSpec,
    ModelVersionInfo,
    PromotionResult,
    history_tags,
    normalize_date,
)

log = logging.getLogger(__name__)


def gate_and_promote(
    tracking: Any,
    *,
    model_name: str,
    version: int | str,
    gate: GateSpec,
    data_cutoff: Any,
    alias: str = DEFAULT_ALIAS,
    evaluation: GateEvaluation | None = None,
) -> PromotionResult:
    """Compare a version with the champion for ``data_cutoff``; record why; promote if it passes.

    With ``evaluation`` both models are loaded from the registry and scored by one function on the
    same rows (basis ``rescored``); without it each version's recorded metric is compared, each
    measured on its own validation rows (basis ``recorded``, logged as a warning).

    Passing makes the version champion for ``data_cutoff`` onwards (history tags) and moves the live
    ``alias`` only if no promotion for a later cut-off exists. The decision is recorded as version
    tags (``dltrain.gate.*``, decision last); calling again with the same gate and evaluation
    replays the recorded decision instead of comparing (or scoring) anything again.
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    check_alias(alias, "alias")
    cutoff = normalize_date(data_cutoff, "data_cutoff")
    mv = get_version(client, model_name, version)
    rule = evaluation.rule(gate) if evaluation is not None else gate.rule
    if _decided(mv, alias, cutoff, rule):
        log.info(
            "%s v%s was already gated for cut-off %s; replaying the recorded decision.",
            model_name,
            mv.version,
            cutoff,
        )
        return _finish(client, mv, alias, cutoff)
    _refuse_moving_a_promotion(mv, alias, cutoff)
    champion = champion_as_of(client, model_name, cutoff, alias, exclude_version=mv.version)
    if evaluation is not None:
        secondary = [s.metric for s in gate.secondary]
        config = tracking_config(tracking, client)
        values = rescore(config, evaluation, gate.metric, mv, champion, secondary=secondary)
    else:
        values = _recorded(client, gate, mv, champion)
    champion_cutoff = _cutoff_of(champion, alias)
    decision = evaluate_gate(
        gate,
        values.candidate_value,
        values.champion_value,
        _version(champion),
        secondary=values.secondary,
        candidate_cutoff=cutoff,
        champion_cutoff=champion_cutoff,
    )
    decision = dataclasses.replace(decision, reason=decision.reason + values.note)
    if gate.policy():  # what a policy decided on, so the trust check can re-decide from the tags
        values = dataclasses.replace(values, champion_cutoff=champion_cutoff)
    _record(client, mv, alias, cutoff, rule, decision, values)
    return _finish(client, get_version(client, model_name, mv.version), alias, cutoff)


def _recorded(
    client: Any, gate: GateSpec, mv: ModelVersionInfo, champion: ModelVersionInfo | None
) -> GateValues:
    """Each version's recorded metric (today's training-time numbers, on different rows)."""
    candidate_value = recorded_metric(client, mv, gate.metric)
    if candidate_value is None:
        raise InvalidSpecError(
            f"{mv.name} v{mv.version} has no metric {gate.metric!r} (no version tag, not on run "
            f"{mv.run_id}): log it during training or gate on a metric the run reports."
        )
    secondary: dict[str, tuple[float | None, float | None]] = {}
    for second in gate.secondary:
        value = recorded_metric(client, mv, second.metric)
        if value is None:
            raise InvalidSpecError(
                f"{mv.name} v{mv.version} has no secondary metric {second.metric!r} (no version tag, not "
                f"on run {mv.run_id}): log it during training or drop it from the gate's secondary list."
            )
        secondary[second.metric] = (
            value,
            recorded_metric(client, champion, second.metric) if champion else None,
        )
    if champion is None:
        return GateValues(candidate_value, None, BASIS_RECORDED, secondary=secondary)
    log.warning(
        "Gating %s v%s on recorded %r values, each measured on its own validation rows, which may "
        "differ from v%s's: pass an evaluation (evaluate_fn=...) to score both on the same rows.",
        mv.name,
        mv.version,
        gate.metric,
        champion.version,
    )
    note = "; recorded values, each measured on its own validation rows"
    champion_value = recorded_metric(client, champion, gate.metric)
    return GateValues(candidate_value, champion_value, BASIS_RECORDED, note=note, secondary=secondary)


def _cutoff_of(mv: ModelVersionInfo | None, alias: str) -> str | None:
    """The champion's training-data cut-off (its run's tag), else the cut-off it was promoted for."""
    if mv is None:
        return None
    key = mv.champion_key(alias)
    return mv.tags.get(TAG_DATA_CUTOFF) or (key[0] if key else None)


def _version(mv: ModelVersionInfo | None) -> int | None:
    return mv.version if mv is not None else None


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
    evaluation: GateEvaluation | None = None,
    params: Mapping[str, Any] | None = None,
) -> PromotionResult:
    """Register the run's model once, then gate and promote it (see :func:`gate_and_promote`).

    Everything that can be checked is checked before anything is written: the gate metric must be
    in ``metrics`` (when given), the evaluation function must import, and the data cut-off must be
    known (``data_cutoff`` or the run's ``dltrain.data_cutoff`` tag).

    :param params: the training run's hyper-parameters (``TrainResult.params``), stored on the
        version as ``dltrain.hparams`` JSON: a re-scoring gate gives them to ``evaluate_fn`` as
        ``ctx.hparams`` (MLflow's own run params are flattened strings).
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    check_alias(alias, "alias")
    if metrics is not None and gate.metric not in metrics:
        raise InvalidSpecError(
            f"metric {gate.metric!r} is not in the training result's metrics {sorted(metrics)}: "
            f"set metric= to one of them or log {gate.metric!r} in the training function."
        )
    missing = [s.metric for s in gate.secondary if metrics is not None and s.metric not in metrics]
    if missing and evaluation is None:  # a re-scoring gate reads them from evaluate_fn's result
        raise InvalidSpecError(
            f"secondary metric(s) {missing} are not in the training result's metrics {sorted(metrics or {})}: "
            "log them in the training function or drop them from the gate policy."
        )
    if evaluation is not None:
        evaluation.function()
    cutoff = normalize_date(data_cutoff or _run_cutoff(client, run_id), "data_cutoff")
    hparams_tag = _hparams_tag(params)
    mv = register_model(
        client,
        model_name=model_name,
        model_uri=model_uri,
        run_id=run_id,
        metrics=metrics,
        tags=hparams_tag,
        registration_key=registration_key,
    )
    if hparams_tag and mv.tags.get(TAG_HPARAMS) != hparams_tag[TAG_HPARAMS]:  # registered before it was kept
        set_tags(client, mv.name, mv.version, hparams_tag)
    return gate_and_promote(
        tracking if tracking is not None else client,
        model_name=model_name,
        version=mv.version,
        gate=gate,
        data_cutoff=cutoff,
        alias=alias,
        evaluation=evaluation,
    )


def _hparams_tag(params: Mapping[str, Any] | None) -> dict[str, str]:
    if not params:
        return {}
    text = json.dumps(dict(params), sort_keys=True, default=str)
    if len(text) > 5000:  # MLflow's tag limit: a gate falls back to the run's flattened params
        log.warning("Hyper-parameters are %d characters of JSON; not stored as %r.", len(text), TAG_HPARAMS)
        return {}
    return {TAG_HPARAMS: text}


def _run_cutoff(client: Any, run_id: str | None) -> str:
    cutoff = client.get_run(run_id).data.tags.get(TAG_DATA_CUTOFF) if run_id else None
    if not cutoff:
        raise InvalidSpecError(
            f"data_cutoff is not set and run {run_id} has no {TAG_DATA_CUTOFF!r} tag: pass "
            "data_cutoff='YYYY-MM-DD' (e.g. '{{ ds }}')."
        )
    return str(cutoff)


def _decided(mv: ModelVersionInfo, alias: str, cutoff: str, rule: str) -> bool:
    tags = mv.tags
    return (
        tags.get(TAG_DECISION) in ("promoted", "rejected")
        and tags.get(TAG_GATE_ALIAS) == alias
        and tags.get(TAG_GATE_CUTOFF) == cutoff
        and tags.get(TAG_GATE_RULE) == rule
    )


_EVAL_TAGS = (TAG_EVAL_FN, TAG_EVAL_DATA, TAG_EVAL_ROWS, TAG_SECONDARY_VALUES, TAG_CHAMPION_CUTOFF)


def _refuse_moving_a_promotion(mv: ModelVersionInfo, alias: str, cutoff: str) -> None:
    """A version holds one promotion record (``<alias>_from``): gating it for another cut-off would move
    or delete that record, and the dates from its cut-off on would lose the champion that scored them."""
    held = mv.tags.get(history_tags(alias)[0])
    if held and held != cutoff:
        raise InvalidSpecError(
            f"{mv.name} v{mv.version} is the {alias!r} champion from cut-off {held}; gating it again for "
            f"cut-off {cutoff} would change the champion of every date from {held} on. Register a new "
            f"version for {cutoff} (or gate v{mv.version} for {held} to replay its decision)."
        )


def _record(
    client: Any,
    mv: ModelVersionInfo,
    alias: str,
    cutoff: str,
    rule: str,
    decision: GateDecision,
    values: GateValues,
) -> None:
    """History tags first, the decision tag last: a crash in between leaves no decision to replay.

    An earlier decision (under another rule) is removed first, so a crash midway can never pair
    the new rule with the old decision.
    """
    delete_tags(client, mv, (TAG_DECISION, *_EVAL_TAGS))
    from_tag, at_tag = history_tags(alias)
    if decision.passed:
        set_tags(client, mv.name, mv.version, {from_tag: cutoff, at_tag: str(int(time.time() * 1000))})
    else:
        delete_tags(client, mv, (from_tag, at_tag))
    evaluated = {
        TAG_EVAL_FN: values.eval_fn,
        TAG_EVAL_DATA: values.eval_data,
        TAG_EVAL_ROWS: values.eval_rows,
        TAG_SECONDARY_VALUES: json.dumps(values.secondary, sort_keys=True) if values.secondary else None,
        TAG_CHAMPION_CUTOFF: values.champion_cutoff,
    }
    set_tags(
        client,
        mv.name,
        mv.version,
        {
            TAG_GATE_ALIAS: alias,
            TAG_GATE_CUTOFF: cutoff,
            TAG_GATE_RULE: rule,
            TAG_GATE_BASIS: values.basis,
            **{key: _text(value)[:5000] for key, value in evaluated.items() if value is not None},
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
    tags = mv.tags
    compared = tags.get(TAG_COMPARED_WITH)
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
        candidate_value=_number(tags.get(TAG_CANDIDATE_VALUE)),
        champion_value=_number(tags.get(TAG_CHAMPION_VALUE)),
        basis=tags.get(TAG_GATE_BASIS) or BASIS_RECORDED,  # decided before bases were recorded
        eval_rows=int(tags[TAG_EVAL_ROWS]) if tags.get(TAG_EVAL_ROWS) else None,
    )


def _text(value: Any) -> str:
    return "" if value is None else (repr(value) if isinstance(value, float) else str(value))


def _number(text: str | None) -> float | None:
    return float(text) if text else None
