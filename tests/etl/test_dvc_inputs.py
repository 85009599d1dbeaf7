"""DVC-tracked raw inputs: pinned to a commit and md5 before Spark, re-run unchanged at the same commit,
recomputed at a new one; read from a local DVC remote (a git repository and the remote in tmp_path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake import DeltaLog
from airflow_provider_dltrain.lake.rerun_facts import META_RERUN_CHANGED, META_RERUN_FACTS

pytest.importorskip("dvc.api")

DS = "2026-11-28"
TRANSFORM = "rerun_transforms:scaled"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A git repository whose ``data/raw.csv`` is tracked by DVC, tagged v1 and v2 (other rows), its
    content pushed to a local DVC remote and its local cache removed: reads must use the remote."""
    import os

    from dvc.repo import Repo

    tmp_path = tmp_path_factory.mktemp("dvc")
    root, remote = tmp_path / "repo", tmp_path / "dvc-remote"
    root.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))  # not /var/tmp/dvc
        patch.setenv("DVC_NO_ANALYTICS", "1")
        cwd = os.getcwd()
        os.chdir(root)  # DVC adds files relative to the working directory
        try:
            repo = _commit_versions(root, remote, Repo)
        finally:
            os.chdir(cwd)
        yield repo


def _commit_versions(root: Path, remote: Path, Repo: Any) -> dict[str, Any]:
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "ci@example.com")
    _git(root, "config", "user.name", "ci")
    repo = Repo.init(str(root))
    with repo.config.edit() as conf:
        conf["remote"]["local"] = {"url": str(remote)}
        conf["core"]["remote"] = "local"
    (root / "data").mkdir()
    commits = {}
    for tag, text in (("v1", "id,x\n1,1.5\n2,2.5\n"), ("v2", "id,x\n1,1.5\n2,2.5\n3,-1\n")):
        (root / "data" / "raw.csv").write_text(text)
        repo.add("data/raw.csv")
        repo.push()
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", tag)
        _git(root, "tag", tag)
        commits[tag] = _git(root, "rev-parse", "HEAD")
    repo.close()
    shutil.rmtree(root / ".dvc" / "cache")
    return {"repo": str(root), "commits": commits}


def _input(dvc_repo: dict[str, Any], rev: str, **dvc: str) -> dict[str, Any]:
    return {"dvc": {"repo": dvc_repo["repo"], "path": "data/raw.csv", "rev": rev, **dvc}, "format": "csv"}


class _TI:
    dag_id, run_id, task_id, try_number, map_index = "nightly", "scheduled__1", "ingest", 1, -1

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def _context() -> dict[str, Any]:
    return {"ti": _TI(), "run_id": _TI.run_id, "logical_date": None, "outlet_events": {}}


def test_a_dvc_input_reruns_unchanged_at_the_same_commit_and_recomputes_at_a_new_revision(
    spark, tmp_path, dvc_repo, monkeypatch
):
    from airflow_provider_dltrain.jobs import stages
    from airflow_provider_dltrain.operators.openlineage import input_datasets
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    runs: list[str] = []
    run_stage = stages.run_stage
    monkeypatch.setattr(stages, "run_stage", lambda *a, **k: runs.append("stage") or run_stage(*a, **k))

    def etl(rev: str) -> SparkToDeltaOperator:
        return SparkToDeltaOperator(
            task_id="ingest",
            table_uri=str(tmp_path / "t"),
            partition={"ds": DS},
            transform=TRANSFORM,
            inputs={"raw": _input(dvc_repo, rev)},
            transform_params={"factor": 2},
        )

    first_op = etl("v1")
    first = first_op.execute(_context())
    assert first["committed"] is True and first["rows_written"] == 2 and runs == ["stage"]
    facts = json.loads(DeltaLog(first["uri"]).commit_info(first["version"])[META_RERUN_FACTS])
    v1 = dvc_repo["commits"]["v1"]
    assert facts["inputs"]["raw"] == {
        "kind": "dvc",
        "repo": dvc_repo["repo"],
        "path": "data/raw.csv",
        "commit": v1,
        "md5": facts["inputs"]["raw"]["md5"],
    }
    (dataset,) = input_datasets(first_op._pinned_inputs)  # lineage: the file at its commit and md5
    assert dataset.name == "data/raw.csv" and dataset.namespace == f"dvc+{dvc_repo['repo']}"
    assert dataset.facets["version"].datasetVersion == f"git:{v1} md5:{facts['inputs']['raw']['md5']}"

    runs.clear()
    again = etl(v1).execute(_context())  # the same commit, named by its SHA this time
    assert runs == [] and again["skipped"] is True and again["committed"] is False
    assert f"raw: data/raw.csv at commit {v1[:12]}" in again["reason"]

    runs.clear()  # HEAD has moved to v2 since: a backfill of DS reads v1, what its nightly read
    backfill = etl("HEAD").execute(_context())
    assert runs == [] and backfill["skipped"] is True and f"at commit {v1[:12]}" in backfill["reason"]

    second = etl("v2").execute(_context())
    assert runs == ["stage"] and second["committed"] is True and second["rows_written"] == 3
    assert DeltaLog(second["uri"]).commit_info(second["version"])[META_RERUN_CHANGED] == "inputs.raw"


def test_a_dvc_input_that_does_not_exist_fails_naming_the_field_before_spark(dvc_repo):
    from airflow_provider_dltrain.etl.dvc_inputs import resolve_dvc_inputs

    for field, change in [
        ("rev", {"rev": "v9"}),
        ("path", {"path": "data/missing.csv"}),
        ("repo", {"repo": "/nonexistent/repo"}),
        ("path", {"path": ".dvc/config"}),  # a file kept in git itself, not tracked by DVC
    ]:
        spec = _input(dvc_repo, "v1")
        spec["dvc"].update(change)
        with pytest.raises(InvalidSpecError, match=rf"inputs\['raw'\]\.dvc\.{field}"):
            resolve_dvc_inputs({"raw": spec})


def test_a_dvc_input_of_the_wrong_shape_is_refused_with_the_other_input_checks():
    from airflow_provider_dltrain.etl.inputs import check_inputs

    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.path is required"):
        check_inputs({"raw": {"dvc": {"repo": "r"}, "format": "csv"}})
    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.format 'xlsx'"):
        check_inputs({"raw": {"dvc": {"repo": "r", "path": "p"}, "format": "xlsx"}})


def test_a_backfill_with_a_moving_rev_reads_the_commit_the_nightly_recorded_for_its_date(dvc_repo):
    """HEAD has moved from v1 to v2 since the nightly of D read v1: a backfill of D reads v1 again,
    a date never written reads today's HEAD, and ``moving_rev: current`` reads today's on purpose."""
    from airflow_provider_dltrain.etl.dvc_inputs import resolve_dvc_inputs

    v1, v2 = dvc_repo["commits"]["v1"], dvc_repo["commits"]["v2"]
    first = resolve_dvc_inputs({"raw": _input(dvc_repo, "v1")}, recorded=lambda: None)["raw"]["dvc"]
    nightly = {"raw": {"kind": "dvc", "repo": dvc_repo["repo"], "path": "data/raw.csv", "commit": v1}}
    for rev in ("HEAD", "master"):
        backfill = resolve_dvc_inputs({"raw": _input(dvc_repo, rev)}, recorded=lambda: nightly)["raw"]["dvc"]
        assert (backfill["commit"], backfill["md5"]) == (v1, first["md5"])
    never_written = resolve_dvc_inputs({"raw": _input(dvc_repo, "HEAD")}, recorded=lambda: None)
    assert never_written["raw"]["dvc"]["commit"] == v2
    forced = _input(dvc_repo, "HEAD", moving_rev="current")
    assert resolve_dvc_inputs({"raw": forced}, recorded=lambda: nightly)["raw"]["dvc"]["commit"] == v2


def test_a_moving_rev_for_a_date_written_without_a_recorded_commit_is_refused_saying_how_to_pin_it(dvc_repo):
    from airflow_provider_dltrain.etl.dvc_inputs import resolve_dvc_inputs

    other = {"raw": {"kind": "files", "files": 1, "hash": "x"}}  # written, but no DVC commit for it
    for recorded in ({}, other):
        with pytest.raises(InvalidSpecError) as err:
            resolve_dvc_inputs({"raw": _input(dvc_repo, "HEAD")}, recorded=lambda r=recorded: r)
        message = str(err.value)
        assert message.startswith("inputs['raw'].dvc.rev: 'HEAD' moves")
        assert "a tag or a commit" in message and "'moving_rev': 'current'" in message
    tagged = resolve_dvc_inputs({"raw": _input(dvc_repo, "v2")}, recorded=lambda: {})  # a tag is stable
    assert tagged["raw"]["dvc"]["commit"] == dvc_repo["commits"]["v2"]


def test_a_dvc_spec_carrying_its_own_commit_and_md5_is_checked_and_never_builds_a_path(
    dvc_repo, tmp_path, monkeypatch
):
    from airflow_provider_dltrain.etl.dvc_inputs import local_copy, resolve_dvc_inputs

    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "dvc").mkdir(parents=True)  # the cache exists, as after any first fetch
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "raw.csv").write_text("id,x\n666,secret\n")
    v1, v2 = dvc_repo["commits"]["v1"], dvc_repo["commits"]["v2"]
    escape = os.path.relpath(outside, tmp_path / "home" / "dvc")
    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.md5 must be the 32 hex digits"):
        local_copy("raw", _input(dvc_repo, "v1", commit=v1, md5=escape))
    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.commit must be the 40 hex digits"):
        resolve_dvc_inputs({"raw": _input(dvc_repo, "v1", commit="../" * 13 + "x", md5="0" * 32)})
    v2_md5 = resolve_dvc_inputs({"raw": _input(dvc_repo, "v2")})["raw"]["dvc"]["md5"]
    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.md5: .* not the md5 .* records"):
        resolve_dvc_inputs({"raw": _input(dvc_repo, "v1", commit=v1, md5=v2_md5)})
    with pytest.raises(
        InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.commit: .* is not the commit 'v1' names"
    ):
        resolve_dvc_inputs({"raw": _input(dvc_repo, "v1", commit=v2)})
    with pytest.raises(InvalidSpecError, match=r"inputs\['raw'\]\.dvc\.commit: 'f{40}' is no commit of"):
        resolve_dvc_inputs({"raw": _input(dvc_repo, "v1", commit="f" * 40)})
    checked = resolve_dvc_inputs({"raw": _input(dvc_repo, "v2", commit=v2, md5=v2_md5)})["raw"]["dvc"]
    assert (checked["commit"], checked["md5"]) == (v2, v2_md5)
