"""Airflow connections for the command line, read the way Airflow reads them outside a task.

Outside a task (no supervisor, no API server) Airflow looks a connection up in the secrets backend
its configuration names, then in the ``AIRFLOW_CONN_<ID>`` environment variable (a URI or JSON);
it never reads the metadata DB there. This module does the same without importing Airflow when no
secrets backend is configured, which keeps ``dltrain`` quick: importing Airflow alone takes longer
than most lookups. With a secrets backend configured, Airflow itself is asked (and must be
installed).
"""

from __future__ import annotations

import configparser
import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.storage import StorageOptions, s3_storage_options

# Connection extras only the Amazon provider's AwsBaseHook can turn into credentials.
_NEEDS_AWS_HOOK = ("role_arn", "assume_role_method", "assume_role_kwargs", "profile_name", "session_kwargs")


@dataclass(frozen=True)
class Connection:
    """The fields of an Airflow connection that this provider reads (no secret in ``repr``)."""

    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    port: int | None = None
    extra_dejson: dict[str, Any] = field(default_factory=dict, repr=False)


def env_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def parse_connection(conn_id: str, value: str) -> Connection:
    """A connection from the text of ``AIRFLOW_CONN_<ID>``: JSON, or Airflow's URI form."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InvalidSpecError(f"{env_var(conn_id)} is not valid JSON: {err}") from err
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
        port = data.get("port")
        return Connection(
            conn_id,
            data.get("conn_type"),
            data.get("host"),
            data.get("login"),
            data.get("password"),
            data.get("schema"),
            int(port) if port not in (None, "") else None,
            dict(extra),
        )
    return _from_uri(conn_id, text)


def _from_uri(conn_id: str, uri: str) -> Connection:
    """Airflow's URI form (``Connection._parse_from_uri``): ``type://login:password@host:port/schema?extra``.

    A host with its own protocol is written ``type://protocol://host``; the extra is the query's
    ``__extra__`` JSON, or the query's keys and values.
    """
    with_protocol = uri.count("://") == 2
    conn_type = urlsplit(uri).scheme
    rest = uri.replace(f"{conn_type}://", "" if with_protocol else "//", 1)
    parts = urlsplit(rest)
    host = unquote(parts.hostname or "") or None
    if with_protocol and host:
        host = f"{parts.scheme}://{host}"
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: dict[str, Any] = json.loads(query["__extra__"] or "{}") if "__extra__" in query else query
    return Connection(
        conn_id,
        conn_type.replace("-", "_") or None,
        host,
        unquote(parts.username) if parts.username else None,
        unquote(parts.password) if parts.password else None,
        unquote(parts.path[1:]) or None,
        parts.port,
        extra,
    )


def secrets_backend_configured() -> bool:
    """Whether Airflow's configuration names a secrets backend (then only Airflow can look up)."""
    for key in (
        "AIRFLOW__SECRETS__BACKEND",
        "AIRFLOW__SECRETS__BACKEND_CMD",
        "AIRFLOW__SECRETS__BACKEND_SECRET",
    ):
        if os.environ.get(key, "").strip():
            return True
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    path = os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error:
        return True  # a config this module cannot read: let Airflow read it
    return bool(parser.get("secrets", "backend", fallback="").strip())


def get_connection(conn_id: str) -> Connection | None:
    """The connection ``conn_id``, or ``None`` when no source Airflow would read here defines it."""
    if secrets_backend_configured():
        return _from_airflow(conn_id)
    value = os.environ.get(env_var(conn_id))
    return parse_connection(conn_id, value) if value else None


def _from_airflow(conn_id: str) -> Connection | None:
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as err:
        if "isn't defined" in str(err):
            return None
        raise
    return Connection(
        conn_id,
        conn.conn_type,
        conn.host,
        conn.login,
        conn.password,
        conn.schema,
        conn.port,
        dict(conn.extra_dejson or {}),
    )


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def aws_storage_options(conn_id: str) -> StorageOptions:
    """delta-rs / pyarrow options for ``s3://`` from an ``aws`` connection, as ``DeltaTableHook`` makes them.

    Keys (login/password or ``aws_access_key_id``/``aws_secret_access_key``), ``aws_session_token``,
    ``region_name``, ``endpoint_url`` (or ``service_config.s3.endpoint_url``),
    ``delta_allow_unsafe_rename`` and ``delta_storage_options`` are read here; a connection that
    assumes a role or names a profile goes through the Amazon provider's hook.
    """
    conn = get_connection(conn_id)
    if conn is None:
        raise InvalidSpecError(
            f"no Airflow connection {conn_id!r}: define it as {env_var(conn_id)} (a URI such as "
            "aws://KEY:SECRET@/?region_name=eu-west-1, or JSON), or pass the settings with "
            "--storage-option KEY=VALUE"
        )
    extra = conn.extra_dejson
    if any(extra.get(key) for key in _NEEDS_AWS_HOOK):
        from airflow_provider_dltrain.hooks.delta import DeltaTableHook

        return DeltaTableHook(aws_conn_id=conn_id).get_storage_options("s3://any")
    s3_config = (extra.get("service_config") or {}).get("s3") or {}
    options = s3_storage_options(
        access_key=conn.login or extra.get("aws_access_key_id"),
        secret_key=conn.password or extra.get("aws_secret_access_key"),
        session_token=extra.get("aws_session_token"),
        region=extra.get("region_name"),
        endpoint_url=s3_config.get("endpoint_url") or extra.get("endpoint_url"),
        allow_unsafe_rename=_truthy(extra.get("delta_allow_unsafe_rename")),
    )
    passthrough = extra.get("delta_storage_options") or {}
    if not isinstance(passthrough, dict):
        raise InvalidSpecError(f"connection {conn_id!r}: extra 'delta_storage_options' must be a JSON object")
    options.update({str(k): str(v) for k, v in passthrough.items()})
    return options


def parse_storage_options(items: list[str] | None) -> StorageOptions:
    """``--storage-option KEY=VALUE`` arguments as a dict; one without ``=`` is refused, naming it."""
    options: StorageOptions = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidSpecError(
                f"--storage-option {item!r}: expected KEY=VALUE, e.g. AWS_REGION=us-east-1 or "
                "AWS_ENDPOINT_URL=http://localhost:9000"
            )
        options[key.strip()] = value
    return options


def cli_storage_options(aws_conn_id: str | None, items: list[str] | None) -> StorageOptions | None:
    """The connection's options with ``--storage-option`` ones on top; ``None`` when neither is given."""
    options = aws_storage_options(aws_conn_id) if aws_conn_id else {}
    options.update(parse_storage_options(items))
    return options or None


def _any_env(*names: str) -> bool:
    return any(os.environ.get(n, "").strip() for n in names)


def _aws_file(env: str, default: str) -> bool:
    return os.path.isfile(os.environ.get(env) or os.path.expanduser(default))


def missing_s3_settings(options: StorageOptions | None) -> list[str]:
    """The S3 settings found nowhere (options, environment, AWS files), each saying how to pass it."""
    opts = options or {}
    missing = []
    has_credentials = (
        (opts.get("AWS_ACCESS_KEY_ID") and opts.get("AWS_SECRET_ACCESS_KEY"))
        or (_any_env("AWS_ACCESS_KEY_ID") and _any_env("AWS_SECRET_ACCESS_KEY"))
        or _any_env("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        or _any_env("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        or _aws_file("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
    )
    if not has_credentials:
        missing.append(
            "missing credentials: pass --aws-conn-id with a connection that has a login and password, "
            "or --storage-option AWS_ACCESS_KEY_ID=... --storage-option AWS_SECRET_ACCESS_KEY=..., or "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
        )
    has_region = (
        opts.get("AWS_REGION")
        or opts.get("AWS_DEFAULT_REGION")
        or _any_env("AWS_REGION", "AWS_DEFAULT_REGION")
        or _aws_file("AWS_CONFIG_FILE", "~/.aws/config")
    )
    if not has_region:
        missing.append(
            "missing region: pass --storage-option AWS_REGION=eu-west-1, or set the connection's extra "
            "region_name, or AWS_REGION in the environment"
        )
    endpoint = opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT")
    if not endpoint and not (not opts and _any_env("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")):
        missing.append(
            "no endpoint: AWS's own S3 endpoint was used; for another S3-compatible store or an "
            "emulator pass --storage-option AWS_ENDPOINT_URL=http://host:9000 (with "
            "AWS_ALLOW_HTTP=true for http), or set the connection's extra endpoint_url"
        )
    return missing


def storage_failure(uri: str, options: StorageOptions | None, err: BaseException) -> InvalidSpecError:
    """The error to show when ``uri`` could not be read: its cause and which settings are missing."""
    from airflow_provider_dltrain.lake.storage import redact

    cause = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    advice = missing_s3_settings(options) or [
        f"settings used: {redact(options) or 'those of the environment'}; check the bucket name, "
        "the endpoint and what these credentials may read"
    ]
    return InvalidSpecError("\n  ".join([f"cannot read {uri}: {cause}", *advice]))
