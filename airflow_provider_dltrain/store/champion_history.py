"""Champion history kept in version tags, because MLflow aliases keep none.

Definition. Promoting version ``v`` for data cut-off ``D`` under alias ``a`` writes two tags on
``v``: ``<a>_from = D`` and ``<a>_promoted_at = <epoch ms>`` (see :func:`history_tags`). The
champion for date ``X`` is, among versions with ``from <= X``, the one with the greatest
``(from, promoted_at, version)``. So a promotion for ``D`` rules from ``D`` until the next later
cut-off that was promoted; a backfilled promotion for an old ``D'`` rules ``[D', next cut-off)``
without touching later dates; re-promoting the same cut-off replaces the earlier champion for it.
The live alias is moved only to the version with the greatest key (see :func:`settle_alias`).

Trust model. Only promotions recorded by our gate count (:func:`gate_promotion_problem`): the
version must also carry ``dltrain.gate.decision = promoted``, ``dltrain.gate.alias = a``,
``dltrain.gate.data_cutoff`` equal to its ``<a>_from`` tag, and a recorded rule and values that
pass that rule again. A version carrying the two history tags but never gated (someone set them by
hand, or a half-written gate) is ignored with a warning. This stops mistakes and half-written
records, not attackers: anyone who can write model-version tags can write a complete, consistent
record too, i.e. whoever can write registry tags can promote. Restrict who can: run the tracking
server with authentication (``mlflow server --app-name basic-auth``) and give the pipeline's user
EDIT/MANAGE permission on its registered models and everyone else READ at most. Scoring loads only
pt2 models unless told otherwise (``store.loading``), so a forged promotion cannot by itself make
a worker unpickle a model.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.store.client import (
    alias_holder,
    check_alias,
    check_name,
    mlflow_client,
    search_versions,
    versions_tagged,
)
from airflow_provider_dltrain.store.gate import evaluate_gate
from airflow_provider_dltrain.store.models import (
    BASIS_RECORDED,
    BASIS_RESCORED,
    DEFAULT_ALIAS,
    TAG_CANDIDATE_VALUE,
    TAG_CHAMPION_CUTOFF,
    TAG_CHAMPION_VALUE,
    TAG_COMPARED_WITH,
    TAG_DATA_CUTOFF,
    TAG_DECISION,
    TAG_GATE_ALIAS,
    TAG_GATE_BASIS,
    TAG_GATE_CUTOFF,
    TAG_GATE_RULE,
    TAG_METRIC_PREFIX,
    TAG_SECONDARY_VALUES,
    GateSpec,
    ModelVersionInfo,
    history_tags,
    normalize_date,
)

log = logging.getLogger(__name__)

# GateSpec.rule: "<metric> <mode> min_delta=<x>", " policy=<compact JSON>" for a gate with policies,
# then " rescored by ..." for a re-scoring gate.
_RULE = re.compile(
    r"(?P<metric>.+?) (?P<mode>min|max) min_delta=(?P<delta>\S+)(?: policy=(?P<policy>\{\S*\}))?(?P<rest> .*)?",
    re.DOTALL,
)
# The rule records min_delta with 6 significant digits: allow that much rounding when re-checking.
_ROUNDING = 1e-5


def champion_history(tracking: Any, model_name: str, alias: str = DEFAULT_ALIAS) -> list[ModelVersionInfo]:
    """Every version our gate promoted under ``alias``, oldest promotion key first.

    Versions with the history tags but no matching gate record are left out (see the module's
    trust model), with a warning naming the version and what is missing.
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    from_tag, _ = history_tags(check_alias(alias, "alias"))
    tagged = search_versions(client, f"name = '{model_name}' and tags.`{from_tag}` != ''")
    keyed = []
    for mv in tagged:
        key = mv.champion_key(alias)
        if key is None:
            continue
        problem = gate_promotion_problem(mv, alias)
        if problem is not None:
            log.warning(
                "Ignoring %s v%s as %r from %s: %s. Only promotions recorded by the dltrain gate count.",
                mv.name,
                mv.version,
                alias,
                key[0],
                problem,
            )
            continue
        keyed.append((key, mv))
    return [mv for _, mv in sorted(keyed, key=lambda pair: pair[0])]


def gate_promotion_problem(mv: ModelVersionInfo, alias: str = DEFAULT_ALIAS) -> str | None:
    """None if ``mv``'s promotion under ``alias`` was recorded by our gate; else what does not match."""
    tags = mv.tags
    from_tag, _ = history_tags(alias)
    if tags.get(TAG_DECISION) != "promoted":
        return f"{TAG_DECISION} is {tags.get(TAG_DECISION)!r}, not 'promoted'"
    if tags.get(TAG_GATE_ALIAS) != alias:
        return f"{TAG_GATE_ALIAS} is {tags.get(TAG_GATE_ALIAS)!r}, not {alias!r}"
    if tags.get(TAG_GATE_CUTOFF) != tags.get(from_tag):
        return (
            f"{TAG_GATE_CUTOFF} {tags.get(TAG_GATE_CUTOFF)!r} differs from {from_tag} {tags.get(from_tag)!r}"
        )
    return _values_problem(tags)


def _values_problem(tags: dict[str, str]) -> str | None:
    """None if the recorded rule and values are present and pass that rule again."""
    rule = tags.get(TAG_GATE_RULE) or ""
    match = _RULE.fullmatch(rule)
    if match is None:
        return f"{TAG_GATE_RULE} {rule[:200]!r} is not a gate rule"
    basis = tags.get(TAG_GATE_BASIS) or BASIS_RECORDED  # decisions older than the basis tag
    rescored_rule = (match["rest"] or "").startswith(f" {BASIS_RESCORED}")
    if basis not in (BASIS_RECORDED, BASIS_RESCORED) or rescored_rule != (basis == BASIS_RESCORED):
        return f"{TAG_GATE_BASIS} {basis!r} does not match {TAG_GATE_RULE} {rule[:200]!r}"
    try:
        delta = float(match["delta"])
        candidate = float(tags[TAG_CANDIDATE_VALUE])
        champion = _optional(tags.get(TAG_CHAMPION_VALUE), float)
        compared = _optional(tags.get(TAG_COMPARED_WITH), int)
        policy = json.loads(match["policy"]) if match["policy"] else None
        gate = GateSpec.with_policy(match["metric"], match["mode"], max(0.0, delta * (1 - _ROUNDING)), policy)
        secondary = {k: tuple(v) for k, v in json.loads(tags.get(TAG_SECONDARY_VALUES) or "{}").items()}
    except (KeyError, ValueError, TypeError, InvalidSpecError) as err:
        return f"the recorded gate values are missing or not numbers ({err})"
    if champion is not None and compared is None:
        return f"{TAG_CHAMPION_VALUE} is set but {TAG_COMPARED_WITH} is not"
    recorded = tags.get(TAG_METRIC_PREFIX + gate.metric)
    if basis == BASIS_RECORDED and recorded is not None and not _same(recorded, candidate):
        return f"{TAG_CANDIDATE_VALUE} {candidate!r} differs from the recorded {gate.metric} {recorded!r}"
    decision = evaluate_gate(
        gate,
        candidate,
        champion,
        compared,
        secondary=secondary,
        candidate_cutoff=tags.get(TAG_GATE_CUTOFF),
        champion_cutoff=tags.get(TAG_CHAMPION_CUTOFF),
    )
    if not decision.passed:
        return f"the recorded values do not pass the recorded rule ({decision.reason})"
    return None


def _optional(text: str | None, kind: Any) -> Any:
    return kind(text) if text not in (None, "", "None") else None


def _same(text: str, value: float) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return number == value or (math.isnan(number) and math.isnan(value))


def champion_as_of(
    tracking: Any,
    model_name: str,
    date: Any,
    alias: str = DEFAULT_ALIAS,
    *,
    exclude_version: int | None = None,
) -> ModelVersionInfo | None:
    """The version that was ``alias`` holder (champion) for data cut-off ``date``; None before the first.

    :param date: ``YYYY-MM-DD`` (or a date/datetime): the data cut-off to answer for.
    :param exclude_version: ignore this version (the candidate being gated).

    Cost flat in the registry's history: the versions promoted for cut-offs in ``date``'s month are
    asked for (one search by the ``<alias>_from`` tag's month prefix), then the month before, up to
    :data:`MONTHS_BACK` months; only when none of those months holds a promotion at or before
    ``date`` is the whole history read (a registry that promoted nothing for months is small).
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    day = normalize_date(date, "date")
    from_tag, _ = history_tags(check_alias(alias, "alias"))
    month = day[:7]
    for _ in range(MONTHS_BACK):
        found = versions_tagged(client, model_name, from_tag, f"{month}-")
        best = _latest_trusted(found, alias, day, exclude_version)
        if best is not None:
            return best
        month = _month_before(month)
    return _latest_trusted(_tagged(client, model_name, from_tag), alias, day, exclude_version)


# How many months a champion lookup asks for one by one before it reads the whole history.
MONTHS_BACK = 3


def _tagged(client: Any, model_name: str, from_tag: str) -> list[ModelVersionInfo]:
    return versions_tagged(client, model_name, from_tag)


def _latest_trusted(
    versions: list[ModelVersionInfo], alias: str, day: str, exclude_version: int | None
) -> ModelVersionInfo | None:
    """The trusted promotion with the greatest key whose cut-off is at or before ``day``."""
    best: tuple[Any, ModelVersionInfo] | None = None
    for mv in versions:
        key = mv.champion_key(alias)
        if key is None or mv.version == exclude_version or key[0] > day:
            continue
        if best is not None and key <= best[0]:
            continue
        if _trusted(mv, alias, key):
            best = (key, mv)
    return best[1] if best else None


def _trusted(mv: ModelVersionInfo, alias: str, key: Any) -> bool:
    from airflow_provider_dltrain.utils.snapshot import remembered

    # a plan asks about the same promotions for every date of a month: judged (and warned of) once
    question = ("gate promotion", alias, frozenset(mv.tags.items()))  # the verdict reads only these
    problem = remembered(question, lambda: gate_promotion_problem(mv, alias))
    if problem is not None:
        log.warning(
            "Ignoring %s v%s as %r from %s: %s. Only promotions recorded by the dltrain gate count.",
            mv.name,
            mv.version,
            alias,
            key[0],
            problem,
        )
    return problem is None


def _month_before(month: str) -> str:
    year, number = int(month[:4]), int(month[5:7])
    return f"{year - 1:04d}-12" if number == 1 else f"{year:04d}-{number - 1:02d}"


def newest_promotion(tracking: Any, model_name: str, alias: str, not_before: str) -> ModelVersionInfo | None:
    """The promotion with the greatest key: the champion as of the later of today and ``not_before``."""
    import datetime as dt

    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    return champion_as_of(tracking, model_name, max(today, not_before), alias)


def has_history(tracking: Any, model_name: str, alias: str = DEFAULT_ALIAS) -> bool:
    """Whether any version carries ``alias``'s promotion tags (one search, one result)."""
    client = mlflow_client(tracking)
    from_tag, _ = history_tags(check_alias(alias, "alias"))
    page = client.search_model_versions(f"name = '{model_name}' and tags.`{from_tag}` != ''", max_results=1)
    return bool(list(page))


def settle_alias(
    tracking: Any, model_name: str, alias: str, candidate: ModelVersionInfo
) -> ModelVersionInfo | None:
    """Point ``alias`` at ``candidate`` if it is the newest promotion; return the holder afterwards.

    The alias moves only when ``candidate`` has the greatest promotion key and its cut-off is not
    older than the live holder's (a holder set by hand counts with its ``dltrain.data_cutoff``).
    Aliases are last-writer-wins, so after moving, the history is read again: if a concurrent
    promotion with a greater key appeared, the alias is handed to it.
    """
    client = mlflow_client(tracking)
    cand_key = candidate.champion_key(alias)
    if cand_key is None:
        return alias_holder(client, model_name, alias)
    live = alias_holder(client, model_name, alias)
    if live is not None and live.version != candidate.version and _is_newer(live, candidate, alias):
        return live  # a backfilled promotion of an older cut-off: the live alias stays
    newest = newest_promotion(client, model_name, alias, cand_key[0])
    if newest is None or newest.version != candidate.version:
        return live
    if live is not None and live.version != candidate.version and _is_newer(live, candidate, alias):
        log.info(
            "Alias %r stays on %s v%s: its cut-off is newer than v%s's.",
            alias,
            model_name,
            live.version,
            candidate.version,
        )
        return live
    if live is None or live.version != candidate.version:
        client.set_registered_model_alias(model_name, alias, str(candidate.version))
    after = newest_promotion(client, model_name, alias, cand_key[0])
    if after is not None and after.version != candidate.version:
        log.warning(
            "A concurrent promotion of %s v%s is newer; handing alias %r to it.",
            model_name,
            after.version,
            alias,
        )
        client.set_registered_model_alias(model_name, alias, str(after.version))
    return alias_holder(client, model_name, alias)


def _is_newer(live: ModelVersionInfo, candidate: ModelVersionInfo, alias: str) -> bool:
    """True when the live holder's cut-off is later than the candidate's promotion cut-off."""
    live_key = live.champion_key(alias)
    live_cutoff = live_key[0] if live_key else live.tags.get(TAG_DATA_CUTOFF)
    cand_key = candidate.champion_key(alias)
    return bool(live_cutoff and cand_key and live_cutoff > cand_key[0])
