"""Raw ETL inputs tracked by DVC: one file of a git repository at a revision, read through ``dvc.api``.

An input ``{"dvc": {"repo": <git URL or path>, "path": "data/raw.csv", "rev": "v1"}, "format": "csv"}``
names a file by repository, path and git revision (a tag, a branch, a commit). Before anything runs,
:func:`resolve_dvc_inputs` pins the revision to its commit SHA and reads the file's DVC content hash
(the md5 its ``.dvc`` file records) - a repository, revision or path that does not exist fails there,
naming the field. The pinned input is what the stage, its re-run facts and its lineage use:

* re-run facts: ``{"kind": "dvc", "repo", "path", "commit", "md5"}``; the same commit re-runs as
  unchanged (no Spark, nothing committed), a new commit recomputes with ``inputs.<name>`` as what
  changed (its content digest then decides whether anything is committed);
* reading: the file's bytes, fetched by ``dvc.api`` from the repository's DVC remote once into
  ``$DLTRAIN_HOME/dvc/<md5>/`` and checked against the md5, are read by Spark as a local raw input
  of the given ``format`` and ``options``.

DVC itself is the ``dvc`` extra; git credentials for a private repository come from git's own
configuration (a credential helper, an SSH key), never from the spec.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, require

KEYS = ("repo", "path", "rev", "commit", "md5")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def is_dvc_spec(spec: Any) -> bool:
    """Whether an input spec names a DVC-tracked file (``{"dvc": {...}, "format": ...}``)."""
    return isinstance(spec, Mapping) and "dvc" in spec


def check_dvc_spec(name: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``dvc`` part of input ``name``, its shape checked (no repository is opened)."""
    field = f"inputs[{name!r}].dvc"
    dvc = spec.get("dvc")
    if not isinstance(dvc, Mapping):
        raise InvalidSpecError(f"{field} must be {{'repo': ..., 'path': ..., 'rev': ...}}, got {dvc!r:.200}")
    unknown = sorted(set(dvc) - set(KEYS))
    if unknown:
        raise InvalidSpecError(f"{field} has unknown keys {unknown}; valid: ['repo', 'path', 'rev']")
    for key in ("repo", "path"):
        if not isinstance(dvc.get(key), str) or not dvc[key]:
            raise InvalidSpecError(
                f"{field}.{key} is required: a git URL or path (repo), a file in it (path)"
            )
    if dvc.get("rev") is not None and not isinstance(dvc["rev"], str):
        raise InvalidSpecError(f"{field}.rev must be a git tag, branch or commit, got {dvc['rev']!r:.100}")
    if "path" in spec:
        raise InvalidSpecError(f"inputs[{name!r}] names both 'path' and 'dvc': keep one")
    return {str(k): str(v) for k, v in dvc.items() if v is not None}


def resolve_dvc_input(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with its revision pinned: ``dvc.commit`` (SHA) and ``dvc.md5`` (content hash) added.

    Raises :class:`InvalidSpecError` naming ``inputs[<name>].dvc.repo|rev|path`` when the repository,
    the revision or a DVC-tracked file at that path does not exist. A spec already pinned is
    returned as it is.
    """
    dvc = check_dvc_spec(name, spec)
    if _SHA.match(dvc.get("commit", "")) and dvc.get("md5"):
        return dict(spec)
    require("dvc.api", "dvc")
    from dvc.api import DVCFileSystem
    from dvc.scm import CloneError, RevError, SCMError

    field = f"inputs[{name!r}].dvc"
    rev = dvc.get("rev") or "HEAD"  # a commit, never a local repository's uncommitted workspace
    try:
        fs = DVCFileSystem(dvc["repo"], rev=rev)
        commit = str(fs.repo.get_rev())  # the SHA rev names (scm.get_rev() is the workspace's HEAD)
        info = fs.info(dvc["path"])
    except RevError as err:
        raise InvalidSpecError(f"{field}.rev: {rev!r} is no revision of {dvc['repo']} ({err})") from err
    except (CloneError, SCMError) as err:
        raise InvalidSpecError(
            f"{field}.repo: {dvc['repo']!r} is not a git repository that can be opened ({type(err).__name__}); "
            "check the URL or path and the git credentials of the worker"
        ) from err
    except FileNotFoundError as err:
        raise InvalidSpecError(f"{field}.path: no {dvc['path']!r} in {dvc['repo']} at {rev}") from err
    md5 = info.get("md5") or (info.get("dvc_info") or {}).get("md5")
    if info.get("type") != "file" or not md5:
        raise InvalidSpecError(
            f"{field}.path: {dvc['path']!r} in {dvc['repo']} at {rev} is not a file tracked by DVC "
            "(a directory, or a file kept in git itself); name a file added with 'dvc add'"
        )
    return {**dict(spec), "dvc": {**dvc, "commit": commit, "md5": str(md5)}}


def resolve_dvc_inputs(inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every input, the DVC ones pinned (:func:`resolve_dvc_input`); the others as they are."""
    return {
        name: resolve_dvc_input(name, spec) if is_dvc_spec(spec) else spec
        for name, spec in (inputs or {}).items()
    }


def dvc_facts(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The re-run facts of a DVC input: repository, path, the pinned commit and the file's md5."""
    dvc = resolve_dvc_input(name, spec)["dvc"]
    return {
        "kind": "dvc",
        "repo": dvc["repo"],
        "path": dvc["path"],
        "commit": dvc["commit"],
        "md5": dvc["md5"],
    }


def dvc_params(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a DVC input counts as a parameter: all but the revision (its commit and md5 count as facts)."""
    dvc = {k: v for k, v in dict(spec["dvc"]).items() if k in ("repo", "path")}
    return {**dict(spec), "dvc": dvc}


def cache_dir() -> str:
    """Where fetched DVC files are kept, by md5: ``$DLTRAIN_HOME/dvc``."""
    return os.path.join(os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain")), "dvc")


def local_copy(name: str, spec: Mapping[str, Any]) -> str:
    """A local path holding the pinned file's bytes (fetched once per md5, checked against it)."""
    pinned = resolve_dvc_input(name, spec)["dvc"]
    folder = os.path.join(cache_dir(), pinned["md5"])
    target = os.path.join(folder, os.path.basename(pinned["path"]))
    if os.path.isfile(target):
        return target
    require("dvc.api", "dvc")
    from dvc.api import open as dvc_open

    os.makedirs(folder, exist_ok=True)
    digest = hashlib.md5(usedforsecurity=False)
    handle, partial = tempfile.mkstemp(dir=folder, prefix=".fetching-")
    try:
        with (
            os.fdopen(handle, "wb") as out,
            dvc_open(pinned["path"], repo=pinned["repo"], rev=pinned["commit"], mode="rb") as source,
        ):
            for chunk in iter(lambda: source.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != pinned["md5"]:
            raise InvalidSpecError(
                f"inputs[{name!r}]: {pinned['path']} at {pinned['commit'][:12]} has md5 {digest.hexdigest()}, not the "
                f"{pinned['md5']} its .dvc file records: the DVC remote holds other bytes"
            )
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def raw_spec(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The DVC input as the raw-file input Spark reads: ``{"path": <local copy>, "format", "options"}``."""
    raw = {k: v for k, v in dict(spec).items() if k not in ("dvc", "aws_conn_id")}
    return {**raw, "path": local_copy(name, spec)}


def describe(spec: Mapping[str, Any]) -> str:
    """``data/raw.csv in <repo> at v1 (3f2a9c1b0d4e)``: what a DVC input reads, in words."""
    dvc = dict(spec.get("dvc") or {})
    commit = f" ({str(dvc['commit'])[:12]})" if dvc.get("commit") else ""
    return f"{dvc.get('path')} in {dvc.get('repo')} at {dvc.get('rev') or 'HEAD'}{commit}"


__all__ = [
    "cache_dir",
    "check_dvc_spec",
    "describe",
    "dvc_facts",
    "dvc_params",
    "is_dvc_spec",
    "local_copy",
    "raw_spec",
    "resolve_dvc_input",
    "resolve_dvc_inputs",
]
