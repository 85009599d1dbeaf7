"""Generated histories of a DVC-versioned input: revisions land, branches move, nightlies and
backfills of dates pin the input through the real ``etl.dvc_inputs.resolve_dvc_input``.

The oracle (plain Python, from docs/operators/etl.md "DVC-versioned inputs"):

* D1 a nightly of D reads the commit its revision names now, and the md5 of the bytes committed there;
* D2 a re-run or backfill of D reads the commit and md5 the last write of D recorded, whatever a
  moving revision (HEAD, a branch) names today — or is refused (a typed error saying how to pin it);
  a tag or a commit SHA names the same commit every day;
* D3 a spec that carries its own ``commit`` and ``md5`` is checked against the repository: the true
  pair is read as it is, any other (another md5, a path-like md5, a commit the repository lacks)
  is refused naming the field.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from airflow_provider_dltrain.exceptions import DltrainError
from tests.contract.contract_checks import SCRATCH, Violation

REVISIONS = 4
DATES = 6
STATS = {"histories": 0, "steps": 0}
_REPO: dict[str, Any] = {}


def _git(root: str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def content(k: int) -> bytes:
    return "".join(f"{i},{i * k}\n" for i in range(k + 2)).encode()


def build_repo() -> dict[str, Any]:
    """A git repository whose ``data/raw.csv`` (tracked by DVC) has REVISIONS commits tagged ``r0``...,
    the bytes in a local DVC remote and the local cache removed; built once per process."""
    if _REPO:
        return _REPO
    import shutil

    from dvc.repo import Repo

    # in memory where there is a tmpfs: DVC's sqlite caches (site cache, the repository's index) sync
    # to disk on every close, a few hundred times a history, which costs more than the resolves on a busy disk
    tmp = tempfile.mkdtemp(prefix="dltrain-contract-dvc-", dir=SCRATCH)
    root, remote = os.path.join(tmp, "repo"), os.path.join(tmp, "remote")
    os.makedirs(os.path.join(root, "data"))
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    os.environ.setdefault("DVC_SITE_CACHE_DIR", os.path.join(tmp, "site-cache"))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "ci@example.com")
    _git(root, "config", "user.name", "ci")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        repo = Repo.init(root)
        with repo.config.edit() as conf:
            conf["remote"]["local"] = {"url": remote}
            conf["core"]["remote"] = "local"
        commits = []
        for k in range(REVISIONS):
            with open(os.path.join(root, "data", "raw.csv"), "wb") as f:
                f.write(content(k))
            repo.add("data/raw.csv")
            repo.push()
            _git(root, "add", "-A")
            _git(root, "commit", "-q", "-m", f"r{k}")
            _git(root, "tag", f"r{k}")
            commits.append(_git(root, "rev-parse", "HEAD"))
        repo.close()
    finally:
        os.chdir(cwd)
    shutil.rmtree(os.path.join(root, ".dvc", "cache"), ignore_errors=True)
    _REPO.update(root=root, commits=commits)
    return _REPO


class DvcHistory(RuleBasedStateMachine):
    """A DVC input's history (see the module); the oracle is the dict of what each date read."""

    def __init__(self) -> None:
        super().__init__()
        self.repo = build_repo()
        self.head = REVISIONS - 1  # the commit the branch (and HEAD) names now
        self.read: dict[int, tuple[str, str]] = {}  # date -> (commit, md5) its last write recorded
        self.steps = 0

    def teardown(self) -> None:
        _git(self.repo["root"], "update-ref", "refs/heads/main", self.repo["commits"][-1])
        if self.steps >= 30:
            STATS["histories"] += 1

    def _spec(self, rev: str, **extra: str) -> dict[str, Any]:
        return {
            "dvc": {"repo": self.repo["root"], "path": "data/raw.csv", "rev": rev, **extra},
            "format": "csv",
        }

    def _resolve(self, spec: dict[str, Any], date: int) -> Any:
        from airflow_provider_dltrain.etl.dvc_inputs import resolve_dvc_input

        STATS["steps"] += 1
        self.steps += 1
        recorded = None
        if date in self.read:
            commit, md5 = self.read[date]
            facts = {
                "kind": "dvc",
                "repo": self.repo["root"],
                "path": "data/raw.csv",
                "commit": commit,
                "md5": md5,
            }
            recorded = {"raw": facts}
        try:
            return resolve_dvc_input("raw", spec, lambda: recorded)["dvc"]
        except DltrainError as err:
            return err
        except Exception as err:
            raise Violation(f"resolve of {spec['dvc']}: untyped error {type(err).__name__}: {err}") from err

    def _truth(self, k: int) -> tuple[str, str]:
        return self.repo["commits"][k], hashlib.md5(content(k), usedforsecurity=False).hexdigest()

    @initialize()
    def start(self) -> None:
        _git(self.repo["root"], "update-ref", "refs/heads/main", self.repo["commits"][self.head])

    @rule(k=st.integers(0, REVISIONS - 1))
    def move_branch(self, k: int) -> None:
        """A new revision lands (or the branch is reset): HEAD and ``main`` name commit k from now on."""
        self.head = k
        _git(self.repo["root"], "update-ref", "refs/heads/main", self.repo["commits"][k])
        self.steps += 1

    @rule(date=st.integers(0, DATES - 1), rev=st.sampled_from(["HEAD", "main", "tag", "sha"]))
    def run_date(self, date: int, rev: str) -> None:
        """The nightly of a new date (D1), or a re-run / backfill of a date already written (D2)."""
        k = self.head
        name = {"tag": f"r{k}", "sha": self.repo["commits"][k]}.get(rev, rev)
        got = self._resolve(self._spec(name), date)
        if date not in self.read or rev in ("tag", "sha"):
            expected = self._truth(k)  # a first write, or a revision that names one commit forever
        else:
            expected = self.read[date]
            if isinstance(got, DltrainError):
                return  # D2: a refusal saying how to pin the revision is allowed
        if isinstance(got, DltrainError):
            raise Violation(f"{rev} ({name}) for date {date} refused: {got} (D1)")
        if (got["commit"], got["md5"]) != expected:
            raise Violation(
                f"{rev} ({name}) for date {date} read commit {got['commit'][:12]} md5 {got['md5']}; the contract "
                f"says {expected[0][:12]} md5 {expected[1]}: the nightly's input (D1, D2)"
            )
        self.read[date] = expected

    @precondition(lambda self: True)
    @rule(k=st.integers(0, REVISIONS - 1), tamper=st.sampled_from(["none", "md5", "path", "commit"]))
    def own_commit_and_md5(self, k: int, tamper: str) -> None:
        """D3: a spec carrying its own commit and md5, true or not."""
        commit, md5 = self._truth(k)
        given = {
            "none": (commit, md5),
            "md5": (commit, self._truth((k + 1) % REVISIONS)[1]),
            "path": (commit, "../../../../etc"),
            "commit": ("f" * 40, md5),
        }[tamper]
        got = self._resolve(self._spec(commit, commit=given[0], md5=given[1]), DATES)
        if tamper == "none":
            if isinstance(got, DltrainError) or (got["commit"], got["md5"]) != (commit, md5):
                raise Violation(f"the true commit and md5 of r{k} were not read as given: {got} (D3)")
        elif not isinstance(got, DltrainError):
            raise Violation(f"a spec with a false {tamper} ({given}) was not refused: read {got} (D3)")
