"""Fingerprints of raw input files from their listing alone: no file is opened.

What a listing gives, and so what "unchanged" means here:

* local paths (a file, a directory read recursively, or a ``*``/``?``/``[...]`` glob): every file's
  path, size, modification time and status-change time (``st_mtime_ns``, ``st_ctime_ns``; a
  symbolic link's own, never its target's: the landing zone does not follow links);
* ``s3://`` prefixes: every object's key, size and ETag (``ListObjectsV2``); without boto3, its
  size and last-modified time from pyarrow's listing.

Every file under the path counts, hidden ones (``_``/``.``) included and whatever ``pathGlobFilter``
keeps out: a file that changed but is not read only costs a recomputation. Limits: a local file
rewritten with the same size, modification time and status-change time (which needs a clock set
back, or a filesystem with coarse timestamps) looks unchanged, and so does an S3 object replaced by
one with the same ETag and size (for a single-part upload the ETag is the MD5 of the content: equal
ETags then mean equal bytes). Globs and ``{a,b}`` alternatives are expanded as the read expands
them (hidden names and linked folders counted). Paths of another scheme and paths that do not
exist have no fingerprint: such a run is computed as it would be without this check.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, is_remote, normalize_uri


@dataclass(frozen=True)
class Listing:
    """What a listing of one input gave: its file count and the hash of every file's facts."""

    files: int
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "files", "files": self.files, "hash": self.hash}


def listing_fingerprint(path: str, storage_options: StorageOptions | None = None) -> Listing | None:
    """The :class:`Listing` of every file at or under ``path``; None when it cannot be known."""
    scheme = urlparse(path).scheme
    if is_remote(path):
        uri = normalize_uri(path)
        entries = _s3_entries(uri, storage_options)
    elif scheme in ("", "file") or len(scheme) == 1:  # a Windows drive letter is no scheme
        uri = normalize_uri(path)
        entries = _local_entries(uri)
    else:
        return None
    if entries is None:
        return None
    text = json.dumps({"path": uri, "entries": sorted(entries)}, separators=(",", ":"))
    return Listing(len(entries), hashlib.sha256(text.encode("utf-8")).hexdigest())


def _local_entries(path: str) -> list[list[Any]] | None:
    from airflow_provider_dltrain.etl.landing_files import glob_matches, has_glob

    # the same expansion the read makes ({a,b} too), hidden names included on every Python version
    roots = glob_matches(path) if has_glob(path) else [path]
    entries: list[list[Any]] = []
    for root in roots:
        if os.path.islink(root) or os.path.isfile(root):
            entries.append(_stat(root, root))
        elif os.path.isdir(root):
            for directory, _, names in os.walk(root):
                entries.extend(_stat(os.path.join(directory, n), root) for n in names)
        elif not has_glob(path):
            return None  # nothing there: the run itself says what is missing
    return entries if roots else None


def _stat(file: str, root: str) -> list[Any]:
    st = os.lstat(file)  # a link's own facts: the landing zone never follows one (etl.landing_files)
    return [os.path.relpath(file, os.path.dirname(root)), st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _s3_entries(uri: str, storage_options: StorageOptions | None) -> list[list[Any]] | None:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    try:
        client = _s3_client(storage_options)
    except ImportError:
        return _pyarrow_entries(uri, storage_options)
    entries: list[list[Any]] = []
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
    for page in pages:
        for item in page.get("Contents", []):
            name = item["Key"]
            if not key or name == key or name.startswith(key.rstrip("/") + "/"):
                entries.append([name, int(item["Size"]), str(item.get("ETag", "")).strip('"')])
    return entries or None


def _s3_client(options: StorageOptions | None) -> Any:
    """A boto3 S3 client reaching what delta-rs reaches with ``options`` (the environment's without)."""
    import boto3

    opts = options or {}
    kwargs = {
        "aws_access_key_id": opts.get("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": opts.get("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": opts.get("AWS_SESSION_TOKEN"),
        "region_name": opts.get("AWS_REGION") or opts.get("AWS_DEFAULT_REGION"),
        "endpoint_url": opts.get("AWS_ENDPOINT_URL") or opts.get("AWS_ENDPOINT"),
    }
    return boto3.client("s3", **{k: v for k, v in kwargs.items() if v})


def _pyarrow_entries(uri: str, storage_options: StorageOptions | None) -> list[list[Any]] | None:
    import pyarrow.fs as pafs

    fs, root = filesystem(uri, storage_options)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return None
    found = (
        [info]
        if info.type == pafs.FileType.File
        else fs.get_file_info(pafs.FileSelector(root, recursive=True))
    )
    return [
        [item.path, int(item.size or 0), item.mtime.isoformat() if item.mtime else ""]
        for item in found
        if item.type == pafs.FileType.File
    ] or None
