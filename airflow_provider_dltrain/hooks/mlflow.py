"""The ``mlflow`` connection: where the tracking server / registry lives and how to authenticate."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_dltrain.store.config import (  # noqa: F401 (re-exported: the hook's API)
    TrackingConfig,
    redact_uri,
    tracking_config_from,
    tracking_uri_from,
)

# A connection test must answer in seconds: no retries with back-off against a dead server.
_PROBE_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


class MlflowHook(BaseHook):
    """Reads an ``mlflow`` connection into a :class:`TrackingConfig` and tests it from the UI.

    A missing connection is not an error: the hook falls back to the embedded store
    (``$MLFLOW_TRACKING_URI`` or SQLite under ``$DLTRAIN_HOME``) so local demos need no setup.

    :param mlflow_conn_id: the Airflow connection id (type ``mlflow``).
    """

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = "mlflow"
    hook_name = "MLflow"

    def __init__(self, mlflow_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mlflow_conn_id = mlflow_conn_id

    def __repr__(self) -> str:
        return f"MlflowHook(mlflow_conn_id={self.mlflow_conn_id!r})"

    def get_tracking_config(self) -> TrackingConfig:
        """Where MLflow lives for this connection, credentials in ``env`` (never logged)."""
        from airflow.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.mlflow_conn_id)
        except AirflowNotFoundException as err:
            if self.mlflow_conn_id != self.default_conn_name:
                # a named connection that does not exist is a typo, not a wish for a local store:
                # silently writing elsewhere would split registrations and champion history
                from airflow_provider_dltrain.exceptions import InvalidSpecError

                raise InvalidSpecError(
                    f"MLflow connection {self.mlflow_conn_id!r} is not defined: create it (conn type 'mlflow') "
                    f"or use {self.default_conn_name!r}, which falls back to the embedded store"
                ) from err
            config = TrackingConfig()
            self.log.info(
                "Connection %r is not defined; using the embedded MLflow store %s.",
                self.mlflow_conn_id,
                redact_uri(config.tracking_uri),
            )
            return config
        return tracking_config_from(conn)

    def get_conn(self) -> Any:
        """An ``MlflowClient`` for this connection (credentials present only during its calls)."""
        return self.get_tracking_config().client()

    get_client = get_conn

    def test_connection(self) -> tuple[bool, str]:
        """(True, message) when the tracking store and the registry answer; (False, why) otherwise."""
        try:
            config = self.get_tracking_config()
        except Exception as err:
            return False, f"{type(err).__name__}: {err}"
        where = redact_uri(config.tracking_uri)
        try:
            from mlflow import MlflowClient

            with config.environment(**_PROBE_ENV):
                client = MlflowClient(
                    tracking_uri=config.tracking_uri, registry_uri=config.registry_uri or config.tracking_uri
                )
                client.search_experiments(max_results=1)
                client.search_registered_models(max_results=1)
        except Exception as err:
            return False, f"Cannot use MLflow at {where}: {config.scrub(str(err))[:500]}"
        return True, f"Connected to MLflow at {where} (tracking and model registry answer)."
