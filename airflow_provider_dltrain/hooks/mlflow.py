"""The ``mlflow`` connection: where the tracking server / registry lives and how to authenticate."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.registry.config import TrackingConfig, redact_uri

# A connection test must answer in seconds: no retries with back-off against a dead server.
_PROBE_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
_BARE_URIS = ("databricks", "uc")


def tracking_uri_from(host: str, port: int | None) -> str:
    """A tracking URI from the connection's host field: a full URI is kept, a bare host gets http(s)."""
    host = host.strip()
    if "://" in host or host.split(":")[0] in _BARE_URIS or host.startswith("/"):
        return host
    scheme = "https" if port == 443 else "http"
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def tracking_config_from(conn: Any) -> TrackingConfig:
    """:class:`TrackingConfig` for an Airflow connection of type ``mlflow``.

    host (+ port) -> tracking URI; extra ``registry_uri`` -> registry URI; login + password ->
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``; password alone ->
    ``MLFLOW_TRACKING_TOKEN``; extra ``insecure_tls`` -> ``MLFLOW_TRACKING_INSECURE_TLS``.
    """
    if not (conn.host or "").strip():
        raise InvalidSpecError(
            f"connection {conn.conn_id!r} has no Tracking URI: set its host to e.g. http://mlflow:5000 or "
            "sqlite:////abs/path/mlflow.db."
        )
    extra = conn.extra_dejson or {}
    env: dict[str, str] = {}
    if conn.login and conn.password:
        env["MLFLOW_TRACKING_USERNAME"] = conn.login
        env["MLFLOW_TRACKING_PASSWORD"] = conn.password
    elif conn.password:
        env["MLFLOW_TRACKING_TOKEN"] = conn.password
    elif conn.login:
        env["MLFLOW_TRACKING_USERNAME"] = conn.login
    if str(extra.get("insecure_tls", extra.get("extra__mlflow__insecure_tls", ""))).lower() in ("true", "1"):
        env["MLFLOW_TRACKING_INSECURE_TLS"] = "true"
    registry_uri = extra.get("registry_uri") or extra.get("extra__mlflow__registry_uri") or None
    return TrackingConfig(
        tracking_uri=tracking_uri_from(conn.host, conn.port),
        registry_uri=str(registry_uri).strip() if registry_uri else None,
        env=env,
    )


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
