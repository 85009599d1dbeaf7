"""Where a training run keeps its rank reports, error reports and checkpoints.

In one process, or under TorchDistributor's local mode, the run directory is a directory on the
driver (``$DLTRAIN_HOME/runs/<run_id>``) and files are written as before. On a cluster the ranks run
on other machines, so the run directory is a URI on shared storage - ``s3://...`` or a path every
node mounts - and ``s3://`` files are written and read through pyarrow's S3 filesystem with the
job's own storage options (never logged).

Layout under the run directory: ``ranks/rank-<r>.json``, ``errors/rank-<r>.json``, ``checkpoints/``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem, is_remote, join, normalize_uri

log = logging.getLogger("airflow_provider_dltrain.training")

RUNS_DIR = "_dltrain_runs"
RUN_URI_ENV = "DLTRAIN_RUN_URI"
_SCHEMES = ("", "file", "s3", "s3a")


def local_run_dir(run_id: str) -> str:
    """``$DLTRAIN_HOME/runs/<run_id>`` on this machine, created."""
    home = os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))
    path = os.path.join(home, "runs", run_id)
    os.makedirs(path, exist_ok=True)
    return path


def check_run_uri(uri: str) -> str:
    """``uri`` normalised (``s3a`` -> ``s3``, ``file://`` -> a path); refuses schemes we cannot write."""
    scheme = urlparse(uri).scheme
    if scheme not in _SCHEMES:
        raise InvalidSpecError(
            f"run_uri {uri!r}: scheme {scheme!r} is not supported; use s3://bucket/prefix or a path "
            "every Spark node mounts (file:///shared/runs)"
        )
    return normalize_uri(uri)


def default_run_root(table_uri: str) -> str:
    """``_dltrain_runs`` beside the table (in its parent directory, or at its bucket's root), not inside it."""
    uri = normalize_uri(table_uri)
    if is_remote(uri):
        bucket, _, key = uri.split("://", 1)[1].partition("/")
        parent = key.rsplit("/", 1)[0] if "/" in key else ""
        return join(f"s3://{bucket}", parent, RUNS_DIR) if parent else join(f"s3://{bucket}", RUNS_DIR)
    return os.path.join(os.path.dirname(uri.rstrip("/")), RUNS_DIR)


def write_json(run_dir: str, kind: str, name: str, data: Mapping[str, Any], options: StorageOptions) -> None:
    """Write ``<run_dir>/<kind>/<name>``; readers see the old file or the whole new one, never a part."""
    text = json.dumps(data, default=str)
    if not is_remote(run_dir):
        directory = os.path.join(run_dir, kind)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{name}.tmp")
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, os.path.join(directory, name))
        return
    fs, root = filesystem(run_dir, options)
    with fs.open_output_stream(join(root, kind, name)) as out:  # an S3 object appears whole
        out.write(text.encode())


def read_json_files(run_dir: str, kind: str, pattern: str, options: StorageOptions) -> list[dict[str, Any]]:
    """Every readable ``<run_dir>/<kind>/<pattern>`` file; unreadable or half-written ones are skipped."""
    import pyarrow.fs as pafs

    fs, root = filesystem(run_dir, options)
    try:
        found = fs.get_file_info(pafs.FileSelector(join(root, kind), allow_not_found=True))
    except OSError as err:
        log.warning("could not list %s/%s: %s", run_dir, kind, err)
        return []
    reports = []
    for info in sorted(found, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not fnmatch.fnmatchcase(info.base_name, pattern):
            continue
        try:
            with fs.open_input_stream(info.path) as handle:
                reports.append(json.loads(handle.read()))
        except (OSError, ValueError):
            continue
    return reports


def checkpoint_uri(run_dir: str) -> str:
    return join(run_dir, "checkpoints") if is_remote(run_dir) else os.path.join(run_dir, "checkpoints")


@contextlib.contextmanager
def rank_checkpoints(run_dir: str, rank: int, options: StorageOptions) -> Iterator[str]:
    """The local directory a rank writes checkpoints to; on shared storage, copied there at the end.

    A local run directory is used as it is (ranks on one machine share it; rank 0 creates it). For
    ``s3://`` each rank gets a scratch directory whose files are copied to ``<run_dir>/checkpoints``
    when the block ends - also when training failed, as a local directory would keep them.
    """
    target = checkpoint_uri(run_dir)
    if not is_remote(run_dir):
        if rank == 0:
            os.makedirs(target, exist_ok=True)
        yield target
        return
    scratch = tempfile.mkdtemp(prefix=f"dltrain-checkpoints-rank{rank}-")
    failed = True
    try:
        yield scratch
        failed = False
    finally:
        try:
            _upload(scratch, target, options)
        except Exception as err:
            if not failed:
                raise
            log.warning("rank %d could not copy its checkpoints to %s: %s", rank, target, err)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _upload(local_dir: str, uri: str, options: StorageOptions) -> None:
    import pyarrow.fs as pafs

    if not any(files for _, _, files in os.walk(local_dir)):
        return
    fs, root = filesystem(uri, options)
    pafs.copy_files(local_dir, root, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def inherit_sys_path() -> contextlib.AbstractContextManager[None]:
    """Let torchrun's processes import what this process can (test modules, DAG folders).

    Only ``PYTHONPATH`` is added for them: MLflow credentials travel inside the pickled job
    (``RankJob.tracking``), never through the environment the ranks inherit.
    """
    from airflow_provider_dltrain.utils.env import scoped_environ

    before = os.environ.get("PYTHONPATH")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    joined = os.pathsep.join(dict.fromkeys([*(before.split(os.pathsep) if before else []), *paths]))
    return scoped_environ({"PYTHONPATH": joined})
