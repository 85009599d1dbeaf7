"""Which model scores: a model spec resolved on the driver to one immutable MLflow model URI."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry.config import TrackingConfig

_SELECTORS = ("alias", "version", "champion_as_of")
_VERSIONED_URI = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>\d+)$")
_URI_SCHEMES = ("models:/", "runs:/", "file:/", "s3://", "mlflow-artifacts:/")

ModelSpec = str | Mapping[str, Any]


@dataclass(frozen=True)
class ScoringModel:
    """The exact model a scoring run uses; ``model_uri`` never moves (no alias, no "latest")."""

    name: str | None  # None for a ``runs:/`` URI that was never registered
    version: str | None
    model_uri: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "model_uri": self.model_uri}


def check_model_spec(spec: object, *, field: str = "model") -> ModelSpec:
    """Return ``spec`` if it has one of the accepted shapes, else raise naming ``field``."""
    hint = (
        "pass 'models:/<name>/<version>', 'runs:/<run_id>/<path>', {'name': n, 'alias': 'champion'}, "
        "{'name': n, 'version': 3} or {'name': n, 'champion_as_of': '2026-11-28'}"
    )
    if isinstance(spec, str):
        if not spec.startswith(_URI_SCHEMES):
            raise InvalidSpecError(f"{field} = {spec!r:.120} is not a model URI: {hint}")
        return spec
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"{field} must be a model URI or dict, got {type(spec).__name__}: {hint}")
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise InvalidSpecError(f"{field} needs a non-empty 'name': {hint}")
    chosen = [k for k in _SELECTORS if k in spec]
    unknown = sorted(set(spec) - {"name", *_SELECTORS})
    if len(chosen) != 1 or unknown:
        raise InvalidSpecError(
            f"{field} must have 'name' and exactly one of {list(_SELECTORS)}; got keys {sorted(spec)}: {hint}"
        )
    return spec


def _pinned(spec: ModelSpec) -> ScoringModel | None:
    """A spec that already names one version needs no registry round-trip."""
    if isinstance(spec, str):
        match = _VERSIONED_URI.match(spec)
        return ScoringModel(match["name"], match["version"], spec) if match else None
    if "version" in spec:
        name, version = str(spec["name"]), str(spec["version"]).strip()
        if not version.isdigit():
            raise InvalidSpecError(f"model.version must be a positive integer, got {spec['version']!r}")
        return ScoringModel(name, version, f"models:/{name}/{version}")
    return None


def resolve_scoring_model(
    spec: object, tracking: TrackingConfig, as_of: str | None = None, *, field: str = "model"
) -> ScoringModel:
    """Resolve ``spec`` (URI, alias, version or champion as of a date) to one pinned model version.

    Aliases and ``champion_as_of`` are resolved once, here on the driver, so every Spark worker
    loads the same version even if the alias moves while the job runs.
    """
    checked = check_model_spec(spec, field=field)
    pinned = _pinned(checked)
    if pinned is not None:
        return pinned
    try:
        from airflow_provider_dltrain.registry import resolve_model  # type: ignore[attr-defined]
    except ImportError as err:  # the registry engine is optional only while it is being built
        raise InvalidSpecError(
            f"{field} = {checked!r:.120} needs the registry to resolve it; pass 'models:/<name>/<version>'"
        ) from err
    resolved = resolve_model(tracking, _registry_spec(checked), as_of=as_of)
    version = getattr(resolved, "version", None)
    name = getattr(resolved, "name", None)
    return ScoringModel(
        name=None if name is None else str(name),
        version=None if version is None else str(version),
        model_uri=str(resolved.model_uri),
    )


def _registry_spec(spec: ModelSpec) -> Any:
    return spec if isinstance(spec, str) else dict(spec)
