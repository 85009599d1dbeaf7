"""Thin helpers over ``MlflowClient``: one client per call, paged searches, typed versions."""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, require
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.store.models import ModelNotFoundError, ModelVersionInfo

_NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
_EXISTS = ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS")


def mlflow_client(tracking: Any) -> Any:
    """An ``MlflowClient`` for a :class:`TrackingConfig`, or the client itself when given one."""
    if isinstance(tracking, TrackingConfig):
        require("mlflow", "mlflow")
        return tracking.client()
    if tracking is None:
        require("mlflow", "mlflow")
        return TrackingConfig().client()
    if hasattr(tracking, "search_model_versions"):
        return tracking
    raise InvalidSpecError(f"expected a TrackingConfig or an MlflowClient, got {type(tracking).__name__}.")


def error_code(err: BaseException) -> str | None:
    """MLflow's error code of ``err`` (e.g. ``RESOURCE_DOES_NOT_EXIST``); None for other errors."""
    return getattr(err, "error_code", None)


def is_not_found(err: BaseException) -> bool:
    return error_code(err) == _NOT_FOUND


# MLflow itself only forbids '/' and ':' in model names; we accept the subset that is safe in
# models:/ URIs, search filters and file names on every store, so an unrendered template
# ("{{ params.model }}") or a stray quote is refused here instead of becoming a model.
_NAME = re.compile(r"\w[\w.\-]*")
# MLflow's own alias rule (mlflow.utils.validation): word characters and '-', 'latest' and
# 'v<digits>' reserved (they mean versions).
_ALIAS = re.compile(r"[\w\-]+")
_RESERVED_ALIAS = re.compile(r"latest|v\d+", re.IGNORECASE)
_MAX_NAME = 255


def check_name(value: Any, field_name: str) -> str:
    """``value`` if it is a valid registered model name; :class:`InvalidSpecError` naming ``field_name``.

    Letters, digits, ``_``, ``-`` and ``.``, starting with a letter, digit or ``_``, at most 255.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidSpecError(f"{field_name} must be a non-empty model name, got {value!r}.")
    if len(value) > _MAX_NAME or not _NAME.fullmatch(value):
        raise InvalidSpecError(
            f"{field_name}={value[:300]!r} is not a valid model name: use letters, digits, '_', '-' and '.' "
            f"(starting with a letter, digit or '_', at most {_MAX_NAME} characters)"
            f"{_template_hint(value)}."
        )
    return value


def check_alias(value: Any, field_name: str) -> str:
    """``value`` if MLflow accepts it as a model alias; :class:`InvalidSpecError` naming ``field_name``."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidSpecError(f"{field_name} must be a non-empty alias such as 'champion', got {value!r}.")
    if len(value) > _MAX_NAME or not _ALIAS.fullmatch(value):
        raise InvalidSpecError(
            f"{field_name}={value[:300]!r} is not a valid alias: MLflow aliases contain only letters, "
            f"digits, '_' and '-' (at most {_MAX_NAME} characters){_template_hint(value)}."
        )
    if _RESERVED_ALIAS.fullmatch(value):
        raise InvalidSpecError(
            f"{field_name}={value!r} is reserved by MLflow ('latest' and 'v<number>' name versions): "
            "choose another alias, e.g. 'champion'."
        )
    return value


def check_quotable(value: Any, field_name: str) -> str:
    """A non-empty string that is safe to quote inside an MLflow search filter (e.g. a model URI)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidSpecError(f"{field_name} must be a non-empty string, got {value!r}.")
    if any(ch in value for ch in "'`\"\n"):
        raise InvalidSpecError(f"{field_name}={value!r} must not contain quotes, backticks or newlines.")
    return value


def _template_hint(value: str) -> str:
    if "{{" in value or "{%" in value:
        return "; it looks like an unrendered template: is the field listed in template_fields?"
    return ""


def search_versions(client: Any, filter_string: str) -> list[ModelVersionInfo]:
    """Every model version matching ``filter_string``, across all result pages (once per
    :func:`~airflow_provider_dltrain.utils.snapshot.snapshot`, e.g. a backfill plan's)."""
    from airflow_provider_dltrain.utils.snapshot import remembered

    store = getattr(client, "_registry_uri", None) or id(client)
    return remembered(("search_versions", store, filter_string), lambda: _search(client, filter_string))


def versions_tagged(client: Any, name: str, tag: str, prefix: str | None = None) -> list[ModelVersionInfo]:
    """The versions of ``name`` whose tag ``tag`` is set (to a value starting with ``prefix``), in the
    order the registry's search gives them.

    One search with that filter; inside a wide :func:`~airflow_provider_dltrain.utils.snapshot.snapshot`
    (a plan of many dates asks it for every month of the range), the block's one search of every
    version of ``name``, filtered here. ``prefix`` is a cut-off's month or day (``2026-05-``): no LIKE
    wildcard in it.
    """
    from airflow_provider_dltrain.utils.snapshot import is_wide, remembered

    if not is_wide():
        where = f"LIKE '{prefix}%'" if prefix is not None else "!= ''"
        return search_versions(client, f"name = '{name}' and tags.`{tag}` {where}")
    every = search_versions(client, f"name = '{name}'")
    store = getattr(client, "_registry_uri", None) or id(client)
    return remembered(
        ("versions_tagged", store, name, tag, prefix),
        lambda: [mv for mv in every if mv.tags.get(tag) and mv.tags[tag].startswith(prefix or "")],
    )


def _search(client: Any, filter_string: str) -> list[ModelVersionInfo]:
    found: list[ModelVersionInfo] = []
    token: str | None = None
    while True:
        page = client.search_model_versions(filter_string, max_results=1000, page_token=token)
        found.extend(ModelVersionInfo.from_mlflow(mv) for mv in page)
        token = getattr(page, "token", None)
        if not token:
            return found


def get_version(client: Any, name: str, version: int | str) -> ModelVersionInfo:
    """One model version, aliases included; :class:`ModelNotFoundError` if it does not exist."""
    try:
        return ModelVersionInfo.from_mlflow(client.get_model_version(name, str(version)))
    except Exception as err:
        if is_not_found(err):
            raise ModelNotFoundError(
                f"model {name!r} has no version {version}: check the registry (MLflow UI -> Models)."
            ) from err
        raise


def alias_holder(client: Any, name: str, alias: str) -> ModelVersionInfo | None:
    """The version ``alias`` points at now; None when the alias (or the model) does not exist."""
    try:
        return ModelVersionInfo.from_mlflow(client.get_model_version_by_alias(name, alias))
    except Exception as err:
        if is_not_found(err) or error_code(err) == "INVALID_PARAMETER_VALUE":
            return None
        raise


def ensure_registered_model(client: Any, name: str) -> None:
    """Create the registered model unless it exists (tolerates a concurrent creator)."""
    try:
        client.create_registered_model(name)
    except Exception as err:
        if error_code(err) not in _EXISTS:
            raise


def set_tags(client: Any, name: str, version: int, tags: dict[str, str]) -> None:
    """Write version tags in the given order (callers put their commit marker last)."""
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, value)


def delete_tags(client: Any, mv: ModelVersionInfo, keys: tuple[str, ...]) -> None:
    """Remove those of ``keys`` that ``mv`` carries."""
    for key in keys:
        if key in mv.tags:
            client.delete_model_version_tag(mv.name, str(mv.version), key)
