"""Where a table lives: local path or ``s3://``, and the options delta-rs and pyarrow need to reach it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pyarrow.fs as pafs

StorageOptions = dict[str, str]

# Keys whose values must never reach a log line, an XCom value or trigger kwargs.
SECRET_KEYS = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "aws_secret_access_key"})


def is_remote(uri: str) -> bool:
    return urlparse(uri).scheme in {"s3", "s3a"}


def normalize_uri(uri: str) -> str:
    """Return ``s3://...`` unchanged (``s3a`` becomes ``s3``) and local paths as absolute paths."""
    parsed = urlparse(uri)
    if parsed.scheme in {"s3", "s3a"}:
        return "s3://" + uri.split("://", 1)[1].rstrip("/")
    if parsed.scheme == "file":
        return os.path.abspath(parsed.path)
    return os.path.abspath(os.path.expanduser(uri))


def redact(options: StorageOptions | None) -> dict[str, str]:
    """Storage options safe to log: secrets replaced by ``***``."""
    return {k: ("***" if k in SECRET_KEYS else v) for k, v in (options or {}).items()}


def s3_storage_options(
    *,
    access_key: str | None,
    secret_key: str | None,
    session_token: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    allow_unsafe_rename: bool = False,
) -> StorageOptions:
    """Build delta-rs storage options for S3 (a custom endpoint such as a moto server included).

    ``allow_unsafe_rename`` gives up delta-rs' protection against two writers committing the same
    version at once. Only set it for an emulator; production S3 needs conditional writes or a
    locking provider (``AWS_S3_LOCKING_PROVIDER``), which can be passed through ``extra``.
    """
    options: StorageOptions = {}
    if access_key:
        options["AWS_ACCESS_KEY_ID"] = access_key
    if secret_key:
        options["AWS_SECRET_ACCESS_KEY"] = secret_key
    if session_token:
        options["AWS_SESSION_TOKEN"] = session_token
    if region:
        options["AWS_REGION"] = region
    if endpoint_url:
        options["AWS_ENDPOINT_URL"] = endpoint_url
        if endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if allow_unsafe_rename:
        options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def filesystem(uri: str, options: StorageOptions | None = None) -> tuple[pafs.FileSystem, str]:
    """Return a pyarrow filesystem and the path of ``uri`` within it."""
    import pyarrow.fs as pafs

    uri = normalize_uri(uri)
    if not is_remote(uri):
        return pafs.LocalFileSystem(), uri
    opts = options or {}
    # Without options (a cloud job using its role) the endpoint comes from the environment, as it
    # does for boto3 and delta-rs; pyarrow alone does not read AWS_ENDPOINT_URL.
    endpoint = (
        opts.get("AWS_ENDPOINT_URL")
        or opts.get("AWS_ENDPOINT")
        or (None if options else os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    )
    kwargs: dict[str, object] = {
        "access_key": opts.get("AWS_ACCESS_KEY_ID"),
        "secret_key": opts.get("AWS_SECRET_ACCESS_KEY"),
        "session_token": opts.get("AWS_SESSION_TOKEN"),
        "region": opts.get("AWS_REGION") or opts.get("AWS_DEFAULT_REGION"),
        # the SDK's default is 1 s: a busy endpoint (or host) refused a read that a retry would get
        "connect_timeout": 10,
    }
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return pafs.S3FileSystem(**kwargs), uri.split("://", 1)[1]


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])
