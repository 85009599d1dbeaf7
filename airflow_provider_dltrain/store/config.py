"""Where MLflow lives, as the engines see it: no Airflow, no secrets in ``repr``."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_provider_dltrain.exceptions import InvalidSpecError


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


def mlflow_run_url(tracking_uri: str, experiment_id: str | None, run_id: str) -> str:
    """The MLflow UI page of a run when the tracking store is a server; "" for a local SQLite store."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme not in ("http", "https") or not experiment_id:
        return ""
    host = parsed.hostname or ""
    netloc = f"{host}:{parsed.port}" if parsed.port else host  # never the user:password part
    return f"{parsed.scheme}://{netloc}{parsed.path.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def strip_userinfo(uri: str | None) -> str | None:
    """``uri`` without any ``user:password@`` part (for a job that must not carry credentials)."""
    return _USERINFO.sub("", uri) if uri else uri


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking/registry location plus the credentials MLflow reads from environment variables.

    ``env`` holds ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` /
    ``MLFLOW_TRACKING_TOKEN`` when a server needs them. They are never written into this process's
    environment for longer than one MLflow call (so no child process inherits them) and are
    excluded from ``repr`` so they never reach a log line. Processes that need them (training
    ranks, Spark workers) get this object, pickled with the job.
    """

    tracking_uri: str = field(default_factory=default_tracking_uri)
    registry_uri: str | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def apply(self) -> None:
        """Point this process's fluent MLflow API at the store (URIs only, never credentials).

        For a server that needs credentials use :meth:`activated` around the calls instead.
        """
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.registry_uri or self.tracking_uri)

    def __repr__(self) -> str:
        return (
            f"TrackingConfig(tracking_uri={redact_uri(self.tracking_uri)!r}, "
            f"registry_uri={redact_uri(self.registry_uri)!r}, env=<{len(self.env)} hidden>)"
        )

    def environment(self, **overrides: str | None) -> contextlib.AbstractContextManager[None]:
        """Credentials (plus ``overrides``; ``None`` unsets) in ``os.environ`` for the block only."""
        from airflow_provider_dltrain.utils.env import scoped_environ

        return scoped_environ({**self.env, **overrides})

    @contextlib.contextmanager
    def activated(self, **overrides: str | None) -> Iterator[None]:
        """MLflow's process-wide store and credentials set to this config for the block, then restored.

        For MLflow's fluent API and ``models:/`` URIs, which resolve against the global tracking and
        registry URIs (a worker or a notebook may be pointed elsewhere).
        """
        import mlflow

        registry = self.registry_uri or self.tracking_uri
        previous = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
        with self.environment(
            MLFLOW_TRACKING_URI=self.tracking_uri, MLFLOW_REGISTRY_URI=registry, **overrides
        ):
            mlflow.set_tracking_uri(self.tracking_uri)
            mlflow.set_registry_uri(registry)
            try:
                yield
            finally:
                # set_tracking_uri also writes MLFLOW_TRACKING_URI; the environment block restores it
                mlflow.set_tracking_uri(previous[0])
                mlflow.set_registry_uri(previous[1])

    def client(self) -> Any:  # an mlflow.MlflowClient
        """An ``MlflowClient`` on this store; each of its calls sees the credentials, nothing else does."""
        from mlflow import MlflowClient

        registry = self.registry_uri or self.tracking_uri
        client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=registry)
        return _ScopedClient(client, self) if self.env else client

    def scrub(self, message: str) -> str:
        """``message`` with every credential of this config replaced by ``***``."""
        for secret in self.env.values():
            if secret and len(secret) > 3 and secret != "true":
                message = message.replace(secret, "***")
        return message


class _ScopedClient:
    """An ``MlflowClient`` whose every method call runs with the config's credentials in the
    environment: MLflow reads them from there at request time, and only then are they present."""

    def __init__(self, client: Any, config: TrackingConfig) -> None:
        self._client, self._config = client, config

    def __repr__(self) -> str:
        return f"<MlflowClient on {redact_uri(self._config.tracking_uri)}>"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._config.environment():
                return attr(*args, **kwargs)

        return call


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


def _artifact_root(tracking_uri: str) -> str | None:
    """Artifacts next to a SQLite store; a server (http, databricks) chooses its own location."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme != "sqlite":
        return None
    db_path = unquote(tracking_uri[len("sqlite:///") :])
    if not db_path.startswith("/"):
        db_path = os.path.abspath(db_path)
    return "file://" + os.path.join(os.path.dirname(db_path), "mlartifacts")


def ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The id of experiment ``name``, created when missing (a concurrent creator is tolerated)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    root = _artifact_root(tracking_uri)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "experiment"
    try:
        return str(client.create_experiment(name, artifact_location=f"{root}/{safe}" if root else None))
    except MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)
