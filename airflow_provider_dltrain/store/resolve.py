"""Turn a model spec (URI, alias, version, champion-as-of) into one immutable model URI."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.store.champion_history import champion_as_of, has_history
from airflow_provider_dltrain.store.client import (
    alias_holder,
    check_alias,
    check_name,
    get_version,
    mlflow_client,
)
from airflow_provider_dltrain.store.models import (
    DEFAULT_ALIAS,
    ModelNotFoundError,
    ModelVersionInfo,
    ResolvedModel,
    normalize_date,
)

log = logging.getLogger(__name__)

_VERSION_URI = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>\d+)/?$")
_ALIAS_URI = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[\w\-]+)/?$")


def resolve_model(tracking: Any, spec: Any, as_of: Any = None) -> ResolvedModel:
    """The exact model a spec names now (or, with ``as_of``, named on that date).

    ``spec`` is one of:

    - ``"models:/name/3"``: that version; ``"models:/name@alias"``: the version the alias holds now;
      any other URI (``runs:/...``, ``models:/m-<id>``, ``s3://...``) is returned unchanged;
    - ``{"name": n, "version": 3}``: that version;
    - ``{"name": n, "champion_as_of": "2026-11-28"}``: the champion for that data cut-off;
    - ``{"name": n, "alias": "champion"}`` (alias defaults to ``champion``): the alias holder now,
      or, when ``as_of`` is given, the champion for ``as_of`` from the recorded history (a backfill
      scores with the model that was champion then). A model with no recorded history falls back to
      the live alias, with a warning;
    - a ModelRef from ``RegisterModelOperator`` (has ``promoted``): its ``champion_version``, the
      model this run's gate chose for its cut-off, never a rejected candidate.

    Raises :class:`ModelNotFoundError` when the version, alias or champion does not exist.
    """
    client = mlflow_client(tracking)
    if isinstance(spec, ModelVersionInfo):
        return _resolved(spec)
    if isinstance(spec, str) and spec.strip().startswith("{"):
        spec = _json_spec(spec)
    if isinstance(spec, str):
        return _resolve_uri(client, spec.strip())
    if isinstance(spec, Mapping):
        return _resolve_mapping(client, spec, as_of)
    raise InvalidSpecError(
        f"model spec {spec!r} is not understood: pass 'models:/name/3', {{'name': n, 'alias': 'champion'}}, "
        "{'name': n, 'version': 3} or {'name': n, 'champion_as_of': 'YYYY-MM-DD'}."
    )


def _resolve_uri(client: Any, uri: str) -> ResolvedModel:
    if not uri:
        raise InvalidSpecError("model spec is an empty string: pass a model URI or a {'name': ...} dict.")
    if "{{" in uri or "{%" in uri:
        raise InvalidSpecError(
            f"model URI {uri[:200]!r} contains an unrendered template: is the field listed in template_fields?"
        )
    if match := _VERSION_URI.match(uri):
        name = check_name(match["name"], "model URI name")
        return _resolved(get_version(client, name, int(match["version"])))
    if match := _ALIAS_URI.match(uri):
        return _resolved(_live(client, check_name(match["name"], "model URI name"), match["alias"]))
    return ResolvedModel(name=None, version=None, model_uri=uri)


def _resolve_mapping(client: Any, spec: Mapping[str, Any], as_of: Any) -> ResolvedModel:
    name = check_name(spec.get("name"), "model spec 'name'")  # type: ignore[arg-type]
    alias = check_alias(spec.get("alias") or DEFAULT_ALIAS, "model spec 'alias'")
    if spec.get("champion_as_of"):
        return _resolved(_champion(client, name, spec["champion_as_of"], alias))
    if "promoted" in spec and "champion_version" in spec:
        if spec["champion_version"] is None:
            cutoff = spec.get("data_cutoff")
            raise ModelNotFoundError(f"{name}: the gate left no champion for data cut-off {cutoff}.")
        return _resolved(get_version(client, name, int(spec["champion_version"])))
    if spec.get("version") is not None:
        return _resolved(get_version(client, name, _version_number(spec["version"])))
    if as_of is not None:
        if has_history(client, name, alias):
            return _resolved(_champion(client, name, as_of, alias))
        log.warning("%s has no recorded %r history; using the live alias for as_of=%s.", name, alias, as_of)
    return _resolved(_live(client, name, alias))


def _champion(client: Any, name: str, date: Any, alias: str) -> ModelVersionInfo:
    day = normalize_date(date, "champion_as_of")
    found = champion_as_of(client, name, day, alias)
    if found is None:
        raise ModelNotFoundError(
            f"{name} had no {alias!r} for data cut-off {day}: no version was promoted on or before it. "
            "Backfill an earlier training date first, or pin a version with {'name': ..., 'version': N}."
        )
    return found


def _live(client: Any, name: str, alias: str) -> ModelVersionInfo:
    found = alias_holder(client, name, alias)
    if found is None:
        raise ModelNotFoundError(
            f"model {name!r} has no alias {alias!r}: promote a version first (RegisterModelOperator) or set "
            "the alias in the MLflow UI."
        )
    return found


def _version_number(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise InvalidSpecError(f"model spec version={value!r} is not an integer version number.") from err


def _json_spec(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise InvalidSpecError(f"model spec {text[:200]!r} looks like JSON but is not: {err}") from err


def _resolved(mv: ModelVersionInfo) -> ResolvedModel:
    return ResolvedModel(name=mv.name, version=mv.version, model_uri=mv.model_uri)
