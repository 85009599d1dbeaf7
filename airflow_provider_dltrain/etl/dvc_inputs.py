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

A revision that moves (``HEAD``, the default, a branch, anything but a tag or a commit SHA) would
give a backfill of date D today's file instead of the one D's nightly read. So a moving revision is
pinned to the commit recorded with the partition's last write (its re-run facts); a partition never
written reads the revision's newest commit, which its write records; a partition written without a
recorded commit for the input is refused, naming how to write a date-stable revision.
``"moving_rev": "current"`` reads the newest commit on purpose.

A ``commit`` or ``md5`` in the spec is never taken on trust: both must have the shape of a git SHA
and an md5, and :func:`resolve_dvc_inputs` checks them against the repository. The stage itself
(:func:`local_copy`, a cloud job) reads the commit and md5 the operator pinned.

DVC itself is the ``dvc`` extra; git credentials for a private repository come from git's own
configuration (a credential helper, an SSH key), never from the spec.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, require

KEYS = ("repo", "path", "rev", "moving_rev", "commit", "md5")
MOVING_REV = ("recorded", "current")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_SHORT_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
# The inputs' re-run facts recorded with the partition's last write; None: never written.
Recorded = Callable[[], "Mapping[str, Any] | None"]


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
        raise InvalidSpecError(f"{field} has unknown keys {unknown}; valid: {list(KEYS)}")
    for key in ("repo", "path"):
        if not isinstance(dvc.get(key), str) or not dvc[key]:
            raise InvalidSpecError(
                f"{field}.{key} is required: a git URL or path (repo), a file in it (path)"
            )
    if os.path.basename(dvc["path"].rstrip("/")) in ("", ".", ".."):
        raise InvalidSpecError(f"{field}.path must name a file, got {dvc['path']!r:.200}")
    if dvc.get("rev") is not None and not isinstance(dvc["rev"], str):
        raise InvalidSpecError(f"{field}.rev must be a git tag, branch or commit, got {dvc['rev']!r:.100}")
    if dvc.get("moving_rev", "recorded") not in MOVING_REV:
        raise InvalidSpecError(
            f"{field}.moving_rev must be one of {list(MOVING_REV)}, got {dvc['moving_rev']!r:.100}"
        )
    _check_digest(field, "commit", dvc.get("commit"), _SHA, "40 hex digits of a git commit SHA")
    _check_digest(field, "md5", dvc.get("md5"), _MD5, "32 hex digits of the md5 DVC records")
    if "path" in spec:
        raise InvalidSpecError(f"inputs[{name!r}] names both 'path' and 'dvc': keep one")
    return {str(k): str(v) for k, v in dvc.items() if v is not None}


def _check_digest(field: str, key: str, value: Any, shape: re.Pattern[str], what: str) -> None:
    # checked before anything is built from it: the md5 names a folder of the local cache
    if value is not None and not (isinstance(value, str) and shape.match(value)):
        raise InvalidSpecError(f"{field}.{key} must be the {what} (lower case), got {value!r:.100}")


def resolve_dvc_input(name: str, spec: Mapping[str, Any], recorded: Recorded | None = None) -> dict[str, Any]:
    """``spec`` with its revision pinned: ``dvc.commit`` (SHA) and ``dvc.md5`` (content hash) set.

    A ``commit`` or ``md5`` the spec carries is checked against the repository, never trusted. A
    moving ``rev`` is pinned to the commit ``recorded()`` holds for the input (see the module).

    :param recorded: the inputs' re-run facts of the partition's last write (``None``: never
        written); without it a moving revision reads its newest commit only with ``moving_rev: current``.
    :raises InvalidSpecError: naming ``inputs[<name>].dvc.repo|rev|path|commit|md5``: the repository,
        the revision or a DVC-tracked file at that path does not exist, a given commit or md5 is not
        the repository's, or a moving revision cannot be pinned for the date.
    """
    dvc = check_dvc_spec(name, spec)
    field = f"inputs[{name!r}].dvc"
    rev = dvc.get("rev") or "HEAD"  # a commit, never a local repository's uncommitted workspace
    fs, commit = _open(field, dvc, dvc.get("commit") or rev)
    if "commit" in dvc and dvc.get("rev"):
        named = _open(field, dvc, rev)[1]
        if named != commit and not _moving(fs, rev, named):
            raise InvalidSpecError(
                f"{field}.commit: {commit!r} is not the commit {rev!r} names ({named}); drop commit, "
                "or give the commit itself as rev"
            )
    elif "commit" not in dvc and _moving(fs, rev, commit) and dvc.get("moving_rev") != "current":
        pinned = _recorded_commit(field, dvc, rev, recorded)
        if pinned is not None and pinned != commit:
            fs, commit = _open(field, dvc, pinned)
    md5 = _md5_at(field, fs, dvc, commit)
    if dvc.get("md5") not in (None, md5):
        raise InvalidSpecError(
            f"{field}.md5: {dvc['md5']!r} is not the md5 the .dvc file of {dvc['path']!r} at {commit[:12]} "
            f"records ({md5}); drop md5, it is read from the repository"
        )
    return {**dict(spec), "dvc": {**dvc, "commit": commit, "md5": md5}}


def _open(field: str, dvc: Mapping[str, str], rev: str) -> tuple[Any, str]:
    """The repository at ``rev`` (a ``DVCFileSystem``) and the commit SHA ``rev`` names."""
    require("dvc.api", "dvc")
    from dvc.api import DVCFileSystem
    from dvc.scm import CloneError, RevError, SCMError

    key = "commit" if rev == dvc.get("commit") else "rev"
    try:
        fs = DVCFileSystem(dvc["repo"], rev=rev)
        return fs, str(fs.repo.get_rev())  # the SHA rev names (scm.get_rev() is the workspace's HEAD)
    except RevError as err:
        raise InvalidSpecError(f"{field}.{key}: {rev!r} is no {key} of {dvc['repo']} ({err})") from err
    except (CloneError, SCMError) as err:
        raise InvalidSpecError(
            f"{field}.repo: {dvc['repo']!r} is not a git repository that can be opened ({type(err).__name__}); "
            "check the URL or path and the git credentials of the worker"
        ) from err


def _moving(fs: Any, rev: str, commit: str) -> bool:
    """Whether ``rev`` may name another commit tomorrow: anything but a tag or (a prefix of) the SHA."""
    if _SHORT_SHA.match(rev) and commit.startswith(rev.lower()):
        return False
    return rev not in set(fs.repo.scm.list_tags())


def _recorded_commit(field: str, dvc: Mapping[str, str], rev: str, recorded: Recorded | None) -> str | None:
    """The commit the partition's last write read for this input; None: never written (read the newest)."""
    inputs = recorded() if recorded is not None else {}
    if inputs is None:
        return None
    for fact in inputs.values():
        same = isinstance(fact, Mapping) and (fact.get("repo"), fact.get("path")) == (
            dvc["repo"],
            dvc["path"],
        )
        if same and fact.get("kind") == "dvc" and _SHA.match(str(fact.get("commit"))):
            return str(fact["commit"])
    raise InvalidSpecError(
        f"{field}.rev: {rev!r} moves (HEAD or a branch), and the partition was written before without a "
        f"recorded commit of {dvc['path']!r} (another tool, an older release, or no partition at all), so "
        "the revision its nightly read is unknown and a re-run would read today's file instead. Name a "
        "date-stable revision: a tag or a commit (e.g. a tag per day, 'rev': 'data-{{ ds }}'), or set "
        "'moving_rev': 'current' to read the newest commit on purpose"
    )


def _md5_at(field: str, fs: Any, dvc: Mapping[str, str], commit: str) -> str:
    try:
        info = fs.info(dvc["path"])
    except FileNotFoundError as err:
        raise InvalidSpecError(f"{field}.path: no {dvc['path']!r} in {dvc['repo']} at {commit[:12]}") from err
    md5 = str(info.get("md5") or (info.get("dvc_info") or {}).get("md5") or "")
    if info.get("type") != "file" or not _MD5.match(md5):
        raise InvalidSpecError(
            f"{field}.path: {dvc['path']!r} in {dvc['repo']} at {commit[:12]} is not a file tracked by DVC "
            "(a directory, or a file kept in git itself); name a file added with 'dvc add'"
        )
    return md5


def resolve_dvc_inputs(inputs: Mapping[str, Any] | None, recorded: Recorded | None = None) -> dict[str, Any]:
    """Every input, the DVC ones pinned (:func:`resolve_dvc_input`); the others as they are.

    :param recorded: called at most once, when a DVC input's revision moves (see the module).
    """
    cached: list[Mapping[str, Any] | None] = []

    def once() -> Mapping[str, Any] | None:
        if not cached:
            cached.append(recorded() if recorded is not None else {})
        return cached[0]

    return {
        name: resolve_dvc_input(name, spec, once) if is_dvc_spec(spec) else spec
        for name, spec in (inputs or {}).items()
    }


def recorded_inputs(
    table_uri: str, partition: Mapping[str, object], storage_options: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The inputs' re-run facts the partition's last write recorded: ``None`` when it was never
    written, ``{}`` when its last write recorded none (another tool, an older release)."""
    from airflow_provider_dltrain.lake.rerun_facts import last_write

    last = last_write(table_uri, partition, dict(storage_options) if storage_options else None)
    if last is None:
        return None
    facts = (last.recorded_facts() if last.wrote(partition) else None) or {}
    inputs = facts.get("inputs")
    return dict(inputs) if isinstance(inputs, Mapping) else {}


def pinned_dvc(name: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``dvc`` part of an input the operator pinned (commit and md5 shape-checked), else pinned now."""
    dvc = check_dvc_spec(name, spec)
    if "commit" in dvc and "md5" in dvc:
        return dvc
    return dict(resolve_dvc_input(name, spec)["dvc"])


def dvc_facts(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The re-run facts of a DVC input: repository, path, the pinned commit and the file's md5."""
    dvc = pinned_dvc(name, spec)
    return {
        "kind": "dvc",
        "repo": dvc["repo"],
        "path": dvc["path"],
        "commit": dvc["commit"],
        "md5": dvc["md5"],
    }


def dvc_params(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a DVC input counts as a parameter: all but the revision (its commit and md5 count as facts)."""
    dvc = {k: v for k, v in dict(spec["dvc"]).items() if k in ("repo", "path")}  # not moving_rev either
    return {**dict(spec), "dvc": dvc}


def cache_dir() -> str:
    """Where fetched DVC files are kept, by md5: ``$DLTRAIN_HOME/dvc``."""
    return os.path.join(os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain")), "dvc")


def local_copy(name: str, spec: Mapping[str, Any]) -> str:
    """A local path holding the pinned file's bytes (fetched once per md5, checked against it)."""
    pinned = pinned_dvc(name, spec)  # the md5 is 32 hex digits: the folder stays inside the cache
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
    "pinned_dvc",
    "raw_spec",
    "recorded_inputs",
    "resolve_dvc_input",
    "resolve_dvc_inputs",
]
