"""Whole objects at a URI: ``s3://`` (or ``s3a://``) through an S3 client, else a local path.

The one place the launcher (:class:`~airflow_provider_dltrain.engines.staging.Stager`), the job's
entry points and the fake AWS read, write and delete staged objects (specs, results, code, logs).
``ec2_node.py`` keeps its own two lines for S3: it is copied verbatim onto instances that do not
have this package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

S3_SCHEMES = ("s3://", "s3a://")


def is_s3(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


def split_s3(uri: str) -> tuple[str, str]:
    """``("bucket", "key")`` of ``s3://bucket/key``."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def _path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _client(s3: Any) -> Any:
    if s3 is not None:
        return s3
    import boto3

    return boto3.client("s3")


def read_object(uri: str, s3: Any = None) -> bytes | None:
    """The object's bytes, or ``None`` when it does not exist. ``s3``: a boto3 client (default: boto3's chain)."""
    if not is_s3(uri):
        path = _path(uri)
        return Path(path).read_bytes() if os.path.exists(path) else None
    client = _client(s3)
    bucket, key = split_s3(uri)
    try:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except client.exceptions.NoSuchKey:
        return None


def write_object(uri: str, data: bytes, s3: Any = None) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _client(s3).put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = Path(_path(uri))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def delete_object(uri: str, s3: Any = None) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _client(s3).delete_object(Bucket=bucket, Key=key)
    elif os.path.exists(_path(uri)):
        os.remove(_path(uri))


def object_exists(uri: str, s3: Any = None) -> bool:
    if not is_s3(uri):
        return os.path.exists(_path(uri))
    bucket, key = split_s3(uri)
    return bool(_client(s3).list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("KeyCount"))
