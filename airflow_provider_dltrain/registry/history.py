"""Champion history kept in version tags, because MLflow aliases keep none.

Definition. Promoting version ``v`` for data cut-off ``D`` under alias ``a`` writes two tags on
``v``: ``<a>_from = D`` and ``<a>_promoted_at = <epoch ms>`` (see :func:`history_tags`). The
champion for date ``X`` is, among versions with ``from <= X``, the one with the greatest
``(from, promoted_at, version)``. So a promotion for ``D`` rules from ``D`` until the next later
cut-off that was promoted; a backfilled promotion for an old ``D'`` rules ``[D', next cut-off)``
without touching later dates; re-promoting the same cut-off replaces the earlier champion for it.
The live alias is moved only to the version with the greatest key (see :func:`settle_alias`).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_dltrain.registry.client import (
    alias_holder,
    check_name,
    mlflow_client,
    search_versions,
)
from airflow_provider_dltrain.registry.models import (
    DEFAULT_ALIAS,
    TAG_DATA_CUTOFF,
    ModelVersionInfo,
    history_tags,
    normalize_date,
)

log = logging.getLogger(__name__)


def champion_history(tracking: Any, model_name: str, alias: str = DEFAULT_ALIAS) -> list[ModelVersionInfo]:
    """Every version ever promoted under ``alias``, oldest promotion key first."""
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    from_tag, _ = history_tags(check_name(alias, "alias"))
    promoted = search_versions(client, f"name = '{model_name}' and tags.`{from_tag}` != ''")
    keyed = [(key, mv) for mv in promoted if (key := mv.champion_key(alias)) is not None]
    return [mv for _, mv in sorted(keyed, key=lambda pair: pair[0])]


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
    """
    day = normalize_date(date, "date")
    eligible = [
        mv
        for mv in champion_history(tracking, model_name, alias)
        if mv.version != exclude_version and (mv.champion_key(alias) or ("",))[0] <= day
    ]
    return eligible[-1] if eligible else None


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
    history = champion_history(client, model_name, alias)
    if not history or history[-1].version != candidate.version:
        return alias_holder(client, model_name, alias)
    live = alias_holder(client, model_name, alias)
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
    after = champion_history(client, model_name, alias)
    if after and after[-1].version != candidate.version:
        log.warning(
            "A concurrent promotion of %s v%s is newer; handing alias %r to it.",
            model_name,
            after[-1].version,
            alias,
        )
        client.set_registered_model_alias(model_name, alias, str(after[-1].version))
    return alias_holder(client, model_name, alias)


def _is_newer(live: ModelVersionInfo, candidate: ModelVersionInfo, alias: str) -> bool:
    """True when the live holder's cut-off is later than the candidate's promotion cut-off."""
    live_key = live.champion_key(alias)
    live_cutoff = live_key[0] if live_key else live.tags.get(TAG_DATA_CUTOFF)
    cand_key = candidate.champion_key(alias)
    return bool(live_cutoff and cand_key and live_cutoff > cand_key[0])
