"""The backfill report's verdicts from real Delta commits, without Airflow (run outcomes as the DB gives them)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

from airflow_provider_dltrain.backfill_report import DateReport, explain, format_report

DAG, RUN, DS = "nightly", "scheduled__2026-11-25T00:00:00+00:00", "2026-11-25"


def _write(uri, digest, *, run_id=RUN, try_number=1, task="ingest", **extra):
    meta = {
        "airflow.dag_id": DAG,
        "airflow.run_id": run_id,
        "airflow.task_id": task,
        "airflow.try_number": str(try_number),
        "dltrain.partition": json.dumps({"ds": DS}),
        "dltrain.content_digest": digest,
        **extra,
    }
    data = pa.table({"ds": [DS], "x": [digest]})
    props = CommitProperties(custom_metadata=meta)
    if os.path.isdir(os.path.join(uri, "_delta_log")):
        write_deltalake(uri, data, mode="overwrite", predicate=f"ds = '{DS}'", commit_properties=props)
    else:
        write_deltalake(uri, data, partition_by=["ds"], commit_properties=props)


def _run(uri, version, try_number, *, jobs=None, committed=None):
    value = {"uri": uri, "version": version}
    if committed is not None:
        value["committed"] = committed
    return {
        "run_id": RUN,
        "state": "success",
        "tasks": {"ingest": "success"},
        "tries": {"ingest": {"try_number": try_number, "start": "2026-11-26T00:00:00+00:00"}},
        "xcom": {"ingest": value},
        "jobs": jobs or {},
    }


def test_a_cleared_rerun_under_the_same_run_id_that_committed_nothing_is_reproduced(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, "a" * 64)  # the nightly, try 1
    # the backfill cleared the run: try 2 found the partition unchanged and handed version 0 back
    report = explain(DAG, DS, [_run(uri, 0, 2, committed=False)])
    assert report.verdict == "reproduced" and report.changes == []
    # the nightly itself, read back: the commit of its own try is a first write
    first = explain(DAG, DS, [_run(uri, 0, 1)])
    assert first.verdict == "computed" and "first write of that partition" in first.changes[0]


def test_a_restated_partition_is_changed_naming_the_partition_and_the_content(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, "a" * 64)
    # the cleared run rewrote the partition with other rows, saying which recorded input changed
    _write(
        uri, "b" * 64, try_number=2, **{"dltrain.rerun_changed": "inputs.labels", "dltrain.rerun_facts": "{}"}
    )
    report = explain(DAG, DS, [_run(uri, 1, 2)])
    assert report.verdict == "changed"
    (change,) = report.changes
    assert f"{uri} partition ds={DS} as version 1 (previous: version 0)" in change
    assert (
        "computed because: inputs.labels; rows changed (content digest aaaaaaaaaaaa → bbbbbbbbbbbb)" in change
    )
    assert "rerun facts" not in change
    text = format_report([report, DateReport(DAG, "2026-11-26", "no run")])
    assert f"{DS}  changed" in text and "2026-11-26  no run of nightly" in text
    assert "total: 1 changed, 1 no run" in text


def test_a_version_committed_by_another_dag_is_not_this_runs_change(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, "a" * 64, run_id="scheduled__other")  # e.g. the ingest DAG; this run only pinned it
    assert explain(DAG, DS, [_run(uri, 0, 1)]).verdict == "reproduced"


def test_a_rerun_that_submitted_a_job_but_committed_nothing_is_recomputed(tmp_path):
    uri = str(tmp_path / "t")
    _write(uri, "a" * 64)
    job = {"engine": "glue", "ids": {"job_name": "etl", "job_run_id": "jr_1"}}
    report = explain(DAG, DS, [_run(uri, 0, 2, jobs={"ingest": job}, committed=False)])
    assert report.verdict == "recomputed"
    assert report.jobs == ['ingest: glue job {"job_name": "etl", "job_run_id": "jr_1"}']


def test_a_date_without_a_run_and_a_failed_run_say_so(tmp_path):
    assert explain(DAG, DS, []).verdict == "no run"
    uri = str(tmp_path / "t")
    _write(uri, "a" * 64)
    failed = {**_run(uri, 0, 1), "state": "failed"}
    assert explain(DAG, DS, [failed]).verdict == "failed"
