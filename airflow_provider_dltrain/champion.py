"""``dltrain champion``: the champion history of a registered model and the champion for a date.

Also where the command-line tools find MLflow: ``--tracking-uri``, else the ``mlflow_default``
Airflow connection, else ``$MLFLOW_TRACKING_URI``, else the embedded store under ``$DLTRAIN_HOME``.
A tool that only reads must never create an empty store and then report "not found".
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry.config import TrackingConfig, redact_uri


class NoStoreError(InvalidSpecError):
    """The MLflow store a read-only command was pointed at does not exist."""


def _connection_config() -> TrackingConfig | None:
    """The ``mlflow_default`` connection's store when that connection is defined, else None."""
    try:
        from airflow.sdk import BaseHook

        from airflow_provider_dltrain.hooks.mlflow import tracking_config_from

        conn = BaseHook.get_connection("mlflow_default")
    except Exception:  # Airflow not configured here, or no such connection: not an error for a CLI
        return None
    return tracking_config_from(conn)


def cli_tracking(tracking_uri: str | None = None) -> TrackingConfig:
    """Where a read-only command finds MLflow; refuses a SQLite store that does not exist yet."""
    if tracking_uri:
        config = TrackingConfig(tracking_uri=tracking_uri)
    else:
        config = _connection_config() or TrackingConfig(tracking_uri=_env_or_home_uri())
    _require_store(config.tracking_uri)
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
    from airflow_provider_dltrain.registry.client import alias_holder, check_name
    from airflow_provider_dltrain.registry.models import ModelNotFoundError

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
