"""Where MLflow lives, as the engines see it: no Airflow, no secrets in ``repr``."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the embedded SQLite store ``$DLTRAIN_HOME/mlflow.db``."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    home = os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))
    os.makedirs(home, exist_ok=True)
    return f"sqlite:///{os.path.join(home, 'mlflow.db')}"


_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


def redact_uri(uri: str | None) -> str | None:
    """``uri`` with any ``user:password@`` part replaced by ``***@`` (safe to log)."""
    return _USERINFO.sub("***@", uri) if uri else uri


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking/registry location plus credentials passed as environment variables.

    ``env`` holds ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` /
    ``MLFLOW_TRACKING_TOKEN`` when a server needs them; it is excluded from ``repr`` so it never
    reaches a log line.
    """

    tracking_uri: str = field(default_factory=default_tracking_uri)
    registry_uri: str | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def apply(self) -> None:
        """Point this process's MLflow client at the store (credentials via environment)."""
        import mlflow

        os.environ.update(self.env)
        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.registry_uri or self.tracking_uri)

    def __repr__(self) -> str:
        return (
            f"TrackingConfig(tracking_uri={redact_uri(self.tracking_uri)!r}, "
            f"registry_uri={redact_uri(self.registry_uri)!r}, env=<{len(self.env)} hidden>)"
        )

    @contextlib.contextmanager
    def environment(self, **overrides: str) -> Iterator[None]:
        """Credentials (plus ``overrides``) in ``os.environ`` for the block only; previous values restored.

        For long-lived processes (the API server's connection test) that must not keep one
        connection's credentials around for the next.
        """
        changes = {**self.env, **overrides}
        saved = {key: os.environ.get(key) for key in changes}
        os.environ.update(changes)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def client(self) -> Any:  # an mlflow.MlflowClient
        """An ``MlflowClient`` on this store; credentials are exported to this process's environment."""
        from mlflow import MlflowClient

        os.environ.update(self.env)
        registry = self.registry_uri or self.tracking_uri
        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=registry)
