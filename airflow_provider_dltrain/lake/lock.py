"""Per-partition write locks, so two runs of one date can never both append the same rows.

delta-rs detects a conflict when two predicate overwrites race, but a commit of files written by
another engine (``create_write_transaction``) into a partition that is still empty carries no
read predicate: both racers would commit and the rows would be duplicated. A lock around
"refresh snapshot → commit" makes the second writer replace the first writer's files instead.

Local tables use ``flock`` (released by the kernel when a process dies, ``kill -9`` included).
S3 tables use a lock object created with a conditional put (``If-None-Match: *``) and a lease, so
a crashed holder's lock expires.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

from airflow_provider_dltrain.exceptions import CommitConflictError
from airflow_provider_dltrain.lake.storage import StorageOptions, is_remote, normalize_uri

LOCK_DIR = "_dltrain_locks"


def _lock_name(resource: str) -> str:
    return hashlib.sha256(resource.encode()).hexdigest()[:24] + ".lock"


@contextlib.contextmanager
def partition_lock(
    uri: str,
    resource: str,
    storage_options: StorageOptions | None = None,
    timeout: float = 600.0,
    lease: float = 900.0,
) -> Iterator[None]:
    """Hold an exclusive lock on ``resource`` (e.g. ``"ds=2026-11-28"``) of table ``uri``."""
    uri = normalize_uri(uri)
    if is_remote(uri):
        with _s3_lock(uri, resource, storage_options or {}, timeout, lease):
            yield
    else:
        with _local_lock(uri, resource, timeout):
            yield


@contextlib.contextmanager
def _local_lock(uri: str, resource: str, timeout: float) -> Iterator[None]:
    import fcntl

    directory = os.path.join(uri, LOCK_DIR)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, _lock_name(resource))
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CommitConflictError(
                        f"another writer has held the lock on {resource} of {uri} for {timeout:.0f}s; retry later"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _s3_client(options: StorageOptions):
    from airflow_provider_dltrain.exceptions import require

    boto3 = require("boto3", "aws")
    return boto3.client(
        "s3",
        aws_access_key_id=options.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=options.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=options.get("AWS_SESSION_TOKEN"),
        region_name=options.get("AWS_REGION") or "us-east-1",
        endpoint_url=options.get("AWS_ENDPOINT_URL"),
    )


@contextlib.contextmanager
def _s3_lock(
    uri: str, resource: str, options: StorageOptions, timeout: float, lease: float
) -> Iterator[None]:
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    key = "/".join(p for p in (prefix, LOCK_DIR, _lock_name(resource)) if p)
    client = _s3_client(options)
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    deadline = time.monotonic() + timeout
    while True:
        body = json.dumps({"owner": token, "expires": time.time() + lease, "resource": resource})
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body.encode(), IfNoneMatch="*")
            break
        except client.exceptions.ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code not in {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}:
                raise
        _break_if_expired(client, bucket, key)
        if time.monotonic() > deadline:
            raise CommitConflictError(f"another writer holds the lock on {resource} of {uri}; retry later")
        time.sleep(0.2)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            current = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            if current.get("owner") == token:
                client.delete_object(Bucket=bucket, Key=key)


def _break_if_expired(client, bucket: str, key: str) -> None:
    try:
        obj = client.get_object(Bucket=bucket, Key=key)
        holder = json.loads(obj["Body"].read())
    except Exception:
        return
    if float(holder.get("expires", 0)) < time.time():
        with contextlib.suppress(Exception):
            client.delete_object(Bucket=bucket, Key=key, IfMatch=obj["ETag"])
