"""``dltrain champion``: the champion history of a registered model and the champion for a date.

Also where the command-line tools find MLflow: ``--tracking-uri``, else the ``mlflow_default``
Airflow connection, else ``$MLFLOW_TRACKING_URI``, else the embedded store under ``$DLTRAIN_HOME``.
A tool that only reads must never create an empty store and then report "not found".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.store.config import TrackingConfig, redact_uri, tracking_config_from


class NoStoreError(InvalidSpecError):
    """The MLflow store a read-only command was pointed at does not exist."""


def _connection_config() -> TrackingConfig | None:
    """The ``mlflow_default`` connection's store when that connection is defined, else None.

    Read as Airflow reads it outside a task (its secrets backend, then ``AIRFLOW_CONN_MLFLOW_DEFAULT``),
    without importing Airflow unless a secrets backend is configured.
    """
    from airflow_provider_dltrain.commands.connections import get_connection

    try:
        conn = get_connection("mlflow_default")
    except ImportError:  # a secrets backend is configured but Airflow is not installed here
        return None
    return tracking_config_from(conn) if conn is not None else None


# What MLflow's own S3 access (artifacts, a SigV4-signed server) reads, from the storage options.
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN": "AWS_SESSION_TOKEN",
    "AWS_REGION": "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL": "MLFLOW_S3_ENDPOINT_URL",
}


def cli_tracking(
    tracking_uri: str | None = None, storage_options: Mapping[str, str] | None = None
) -> TrackingConfig:
    """Where a read-only command finds MLflow; refuses a SQLite store that does not exist yet.

    ``storage_options`` (from ``--aws-conn-id`` / ``--storage-option``) also reach MLflow's calls
    as the AWS environment it reads, for a store that keeps artifacts on S3.
    """
    if tracking_uri:
        config = TrackingConfig(tracking_uri=tracking_uri)
    else:
        config = _connection_config() or TrackingConfig(tracking_uri=_env_or_home_uri())
    _require_store(config.tracking_uri)
    given = dict(storage_options or {})
    aws = {env: str(given[key]) for key, env in _AWS_ENV.items() if given.get(key)}
    if aws:
        config = TrackingConfig(config.tracking_uri, config.registry_uri, {**config.env, **aws})
    return config


def _env_or_home_uri() -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    home = os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))
    return f"sqlite:///{os.path.join(home, 'mlflow.db')}"


def _require_store(uri: str) -> None:
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        path = unquote(uri[len("sqlite:///") :])
        if not os.path.isfile(os.path.abspath(path)):
            raise NoStoreError(
                f"no MLflow store at {uri}: pass --tracking-uri, define the mlflow_default connection, "
                "or set DLTRAIN_HOME to the home the pipeline ran with"
            )
    elif parsed.scheme in ("", "file") and not os.path.isdir(unquote(parsed.path or uri)):
        raise NoStoreError(f"no MLflow store at {redact_uri(uri)}: pass --tracking-uri")


def _when(millis: str | None) -> str:
    if not millis:
        return "-"
    stamp = datetime.fromtimestamp(int(millis) / 1000, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def champion_report(
    tracking: TrackingConfig, model_name: str, as_of: str | None, alias: str
) -> dict[str, Any]:
    """The history (oldest promotion first), the live alias holder and the champion for ``as_of``."""
    from airflow_provider_dltrain.registry import champion_as_of, champion_history, history_tags
    from airflow_provider_dltrain.store.client import alias_holder, check_name
    from airflow_provider_dltrain.store.models import ModelNotFoundError

    check_name(model_name, "model_name")
    client = tracking.client()
    try:
        client.get_registered_model(model_name)
    except Exception as err:
        raise ModelNotFoundError(
            f"no registered model {model_name!r} in {redact_uri(tracking.tracking_uri)}"
        ) from err
    from_tag, at_tag = history_tags(alias)
    history = [
        {
            "cutoff": mv.tags.get(from_tag),
            "version": mv.version,
            "promoted_at": _when(mv.tags.get(at_tag)),
            "candidate_value": mv.tags.get("dltrain.gate.candidate_value"),
            "champion_value": mv.tags.get("dltrain.gate.champion_value"),
            "compared_with": mv.tags.get("dltrain.gate.compared_with") or None,
            "basis": mv.tags.get("dltrain.gate.basis", "recorded"),
            "rule": mv.tags.get("dltrain.gate.rule"),
            "reason": mv.tags.get("dltrain.gate.reason", ""),
        }
        for mv in champion_history(client, model_name, alias)
    ]
    live = alias_holder(client, model_name, alias)
    report: dict[str, Any] = {
        "model": model_name,
        "alias": alias,
        "history": history,
        "live": live.version if live else None,
    }
    if as_of:
        found = champion_as_of(client, model_name, as_of, alias)
        report["as_of"] = as_of
        report["champion"] = found.version if found else None
    return report


def format_champion(report: dict[str, Any]) -> str:
    lines = [f"champion history of {report['model']} (alias {report['alias']!r}), oldest first:"]
    if not report["history"]:
        lines.append("  (no version was ever promoted)")
    for h in report["history"]:
        compared = (
            f"vs v{h['compared_with']} {h['champion_value']}" if h["compared_with"] else "first champion"
        )
        lines.append(
            f"  from {h['cutoff']}  v{h['version']}  promoted {h['promoted_at']}  "
            f"{h['rule'] or ''}: {h['candidate_value']} {compared} ({h['basis']})"
        )
    lines.append(
        f"live alias {report['alias']!r}: " + (f"v{report['live']}" if report["live"] else "not set")
    )
    if "as_of" in report:
        champion = report["champion"]
        lines.append(
            f"champion for {report['as_of']}: "
            + (f"v{champion}" if champion is not None else "none (no promotion at or before that date)")
        )
    return "\n".join(lines)
