"""Register a training run's model as a model version, exactly once per (model, run, model URI)."""

from __future__ import annotations

import logging
import math
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.store.client import (
    check_name,
    check_quotable,
    ensure_registered_model,
    mlflow_client,
    search_versions,
)
from airflow_provider_dltrain.store.models import (
    RUN_TAG_PREFIX,
    TAG_METRIC_PREFIX,
    TAG_MODEL_URI,
    TAG_REGISTRATION_KEY,
    ModelVersionInfo,
)

log = logging.getLogger(__name__)

# MLflow rejects model-version tag values longer than this.
_MAX_TAG_VALUE = 5000


def register_model(
    tracking: Any,
    *,
    model_name: str,
    model_uri: str,
    run_id: str | None = None,
    metrics: dict[str, float] | None = None,
    tags: dict[str, str] | None = None,
    registration_key: str | None = None,
) -> ModelVersionInfo:
    """Make ``model_uri`` a version of ``model_name`` and return it; re-registering returns the same one.

    The version carries every ``dltrain.*`` tag of the MLflow run, ``dltrain.metric.<name>`` for
    ``metrics``, ``dltrain.model_uri`` and ``dltrain.registration_key`` (e.g. ``<dag_id>/<run_id>`` of
    the Airflow run). A version already registered from the same MLflow run and model URI is reused;
    when two callers race (MLflow numbers versions MAX+1 without a lock), the lower version is kept
    and the other one is deleted.

    :param tracking: a :class:`TrackingConfig` or an ``MlflowClient``.
    :param model_uri: what the run logged: ``models:/m-<id>``, ``runs:/<run>/<path>`` or a storage URI.
    """
    client = mlflow_client(tracking)
    check_name(model_name, "model_name")
    check_quotable(model_uri, "model_uri")
    source, model_id, run_id = _model_source(client, model_uri, run_id)
    existing = _registered_copies(client, model_name, model_uri, run_id)
    if existing:
        log.info(
            "Model %s version %s already holds %s; not registering again.",
            model_name,
            existing[0].version,
            model_uri,
        )
        return existing[0]
    version_tags = _version_tags(client, run_id, model_uri, metrics, tags, registration_key)
    ensure_registered_model(client, model_name)
    created = client.create_model_version(
        model_name, source, run_id=run_id, tags=version_tags, model_id=model_id
    )
    log.info("Registered %s as model %s version %s.", model_uri, model_name, created.version)
    return _keep_lowest(client, model_name, model_uri, run_id, int(created.version))


def _registered_copies(
    client: Any, model_name: str, model_uri: str, run_id: str | None
) -> list[ModelVersionInfo]:
    """Versions of ``model_name`` registered from exactly this run and model URI, lowest first."""
    by = f"run_id = '{run_id}'" if run_id else f"tags.`{TAG_MODEL_URI}` = '{model_uri}'"
    candidates = search_versions(client, f"name = '{model_name}' and {by}")
    same = [mv for mv in candidates if mv.tags.get(TAG_MODEL_URI) == model_uri]
    return sorted(same, key=lambda mv: mv.version)


def _keep_lowest(
    client: Any, model_name: str, model_uri: str, run_id: str | None, created: int
) -> ModelVersionInfo:
    """Resolve a registration race: every racer converges on the lowest version, extras are deleted."""
    copies = _registered_copies(client, model_name, model_uri, run_id)
    keep = copies[0] if copies else None
    if keep is None:  # searches may lag a write on some stores; trust what create returned
        return ModelVersionInfo.from_mlflow(client.get_model_version(model_name, str(created)))
    if keep.version != created:
        log.warning(
            "A concurrent registration of %s created version %s first; deleting duplicate %s.",
            model_uri,
            keep.version,
            created,
        )
        client.delete_model_version(model_name, str(created))
    return keep


def _version_tags(
    client: Any,
    run_id: str | None,
    model_uri: str,
    metrics: dict[str, float] | None,
    tags: dict[str, str] | None,
    registration_key: str | None,
) -> dict[str, str]:
    """Run provenance (``dltrain.*`` run tags) + metrics + caller tags + the idempotency tags."""
    out: dict[str, str] = {}
    if run_id:
        run_tags = client.get_run(run_id).data.tags
        out.update({k: v for k, v in run_tags.items() if k.startswith(RUN_TAG_PREFIX)})
    for name, value in (metrics or {}).items():
        out[TAG_METRIC_PREFIX + name] = _metric_text(name, value)
    out.update({str(k): str(v) for k, v in (tags or {}).items()})
    out[TAG_MODEL_URI] = model_uri
    if registration_key:
        out[TAG_REGISTRATION_KEY] = registration_key
    too_long = [k for k, v in out.items() if len(v) > _MAX_TAG_VALUE]
    if too_long:
        raise InvalidSpecError(f"tag values over {_MAX_TAG_VALUE} characters cannot be stored: {too_long}.")
    return out


def _metric_text(name: str, value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise InvalidSpecError(f"metric {name!r}={value!r} is not a number.") from err
    return repr(number) if math.isfinite(number) else str(number)


def _model_source(client: Any, model_uri: str, run_id: str | None) -> tuple[str, str | None, str | None]:
    """(source, logged-model id, run id) to create the version from.

    MLflow 3 logs models as *logged models* (``models:/m-<id>``). The version's source is the
    logged model's artifact location, so creating it needs no process-global tracking URI.
    """
    if model_uri.startswith("models:/"):
        rest = model_uri[len("models:/") :].strip("/")
        if "/" not in rest and "@" not in rest:
            logged = client.get_logged_model(rest)
            return logged.artifact_location, logged.model_id, run_id or logged.source_run_id
        return model_uri, None, run_id
    if model_uri.startswith("runs:/"):
        run_part, _, artifact_path = model_uri[len("runs:/") :].partition("/")
        run_id = run_id or run_part
        logged = _logged_model_of_run(client, run_part, artifact_path.strip("/"))
        if logged is not None:
            return logged.artifact_location, logged.model_id, run_id
    return model_uri, None, run_id


def _logged_model_of_run(client: Any, run_id: str, artifact_path: str) -> Any | None:
    """The newest logged model named ``artifact_path`` from ``run_id``; None for run-artifact models."""
    if not artifact_path:
        return None
    run = client.get_run(run_id)
    found = client.search_logged_models(
        experiment_ids=[run.info.experiment_id],
        filter_string=f"source_run_id = '{run_id}' AND name = '{artifact_path}'",
    )
    models = sorted(found, key=lambda m: m.creation_timestamp or 0)
    return models[-1] if models else None
