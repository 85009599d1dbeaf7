"""Where MLflow lives, as the engines see it: no Airflow, no secrets in ``repr``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the embedded SQLite store ``$DLTRAIN_HOME/mlflow.db``."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    home = os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))
    os.makedirs(home, exist_ok=True)
    return f"sqlite:///{os.path.join(home, 'mlflow.db')}"


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

    def client(self):  # noqa: ANN201 - mlflow.MlflowClient
        from mlflow import MlflowClient

        os.environ.update(self.env)
        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.registry_uri or self.tracking_uri)
