"""Which model scores: a model spec resolved on the driver to one immutable MLflow model URI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.store.config import TrackingConfig

_HINT = (
    "pass 'models:/<name>/<version>', 'models:/<name>@<alias>', 'runs:/<run_id>/<path>', "
    "{'name': n, 'alias': 'champion'}, {'name': n, 'version': 3} "
    "or {'name': n, 'champion_as_of': 'YYYY-MM-DD'}"
)


@dataclass(frozen=True)
class ScoringModel:
    """The exact model a scoring run uses; ``model_uri`` never moves (no alias, no "latest")."""

    name: str | None  # None for a ``runs:/`` URI that was never registered
    version: int | None
    model_uri: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "model_uri": self.model_uri}


def check_model_spec(spec: object, *, field: str = "model") -> str | Mapping[str, Any]:
    """Return ``spec`` if it is a non-empty URI or a dict with a ``name``; else raise naming ``field``."""
    if isinstance(spec, str):
        if not spec.strip():
            raise InvalidSpecError(f"{field} is an empty string (did a template render to nothing?): {_HINT}")
        return spec
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"{field} must be a model URI or a dict, got {type(spec).__name__}: {_HINT}")
    if not isinstance(spec.get("name"), str) or not spec["name"].strip():
        raise InvalidSpecError(f"{field} needs a non-empty 'name', got keys {sorted(spec)}: {_HINT}")
    return spec


def require_loadable(model: ScoringModel, tracking: TrackingConfig, *, allow_pickle: bool = False) -> None:
    """Refuse ``model`` on the driver if loading it would run code it carries, before any worker loads it.

    Reads only the model's MLmodel file and artifact listing. A model saved in PyTorch's pickle
    format (or logged with ``code_paths``) is refused with :class:`UnsafeModelError`, naming the
    version and how to re-log it; with ``allow_pickle=True`` it is allowed and a warning is logged.
    """
    from airflow_provider_dltrain.store.loading import check_loadable, model_label

    label = model_label(model.name, model.version, model.model_uri)
    check_loadable(tracking, model.model_uri, label, allow_pickle=allow_pickle)


def resolve_scoring_model(
    spec: object, tracking: TrackingConfig, as_of: str | None = None, *, field: str = "model"
) -> ScoringModel:
    """Resolve ``spec`` (URI, alias, version or champion as of a date) to one pinned model version.

    Aliases and champions are resolved once, here on the driver, so every Spark worker loads the
    same version even if the alias moves while the job runs. With ``as_of`` an alias spec means
    "the champion on that date" (a backfill scores with the model that was champion then).

    :raises InvalidSpecError: the spec is malformed (the message starts with ``field``).
    :raises ModelNotFoundError: the version, alias or champion does not exist.
    """
    from airflow_provider_dltrain.store.resolve import resolve_model

    checked = check_model_spec(spec, field=field)
    try:
        plain = checked if isinstance(checked, str) else dict(checked)
        resolved = resolve_model(tracking, plain, as_of=as_of)
    except DltrainUserError as err:
        raise type(err)(f"{field}: {err}") from err
    return ScoringModel(
        name=resolved.name,
        version=None if resolved.version is None else int(resolved.version),
        model_uri=resolved.model_uri,
    )


def artifact_location(model: ScoringModel, tracking: TrackingConfig) -> str:
    """Where the pinned model's files are (``s3://…``, a path), for a job that loads them directly."""
    with tracking.activated():
        if model.name and model.version is not None:
            uri = tracking.client().get_model_version_download_uri(model.name, str(model.version))
            return str(uri)
        from mlflow.store.artifact.runs_artifact_repo import RunsArtifactRepository

        if RunsArtifactRepository.is_runs_uri(model.model_uri):
            return str(RunsArtifactRepository.get_underlying_uri(model.model_uri))
    return model.model_uri
