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


def _bf_run(state, tasks, *, backfill_id=1, completed=False, started=True, max_active_runs=1):
    """A backfill run as run_outcomes gives it: the cases below were seen under a real scheduler."""
    start = "2026-01-02T00:00:00+00:00" if started else None
    return {
        "run_id": f"backfill__{state}",
        "state": state,
        "tasks": tasks,
        "tries": {t: {"try_number": 1 if started else 0, "start": start} for t in tasks},
        "xcom": {},
        "jobs": {},
        "backfill": {
            "id": backfill_id,
            "completed": completed,
            "paused": completed,
            "max_active_runs": max_active_runs,
        },
    }


def test_a_queued_or_running_date_is_in_progress_not_failed():
    from airflow_provider_dltrain.backfill_report import format_line

    report = explain(DAG, DS, [_bf_run("queued", {"first": "none", "second": "none"}, started=False)])
    assert report.verdict == "in progress"
    assert format_line(report)[0].startswith(f"{DS}  in progress: the run is queued or running")


def test_runs_a_cancelled_backfill_failed_before_they_ran_say_to_backfill_them_again():
    from airflow_provider_dltrain.backfill_report import stall_notes

    stopped = _bf_run("failed", {"first": "none", "second": "none"}, completed=True, started=False)
    (note,) = stall_notes("2026-01-04", {"2026-01-04": stopped})
    assert "backfill 1 was cancelled" in note and "Missing and Errored Runs" in note
    really_failed = _bf_run("failed", {"first": "failed", "second": "upstream_failed"}, completed=True)
    assert stall_notes("2026-01-04", {"2026-01-04": really_failed}) == []


def test_a_run_queued_in_a_cancelled_backfill_names_the_airflow_bug_and_the_way_out():
    from airflow_provider_dltrain.backfill_report import stall_notes

    stranded = _bf_run("queued", {"first": "none"}, completed=True, started=False)
    (note,) = stall_notes("2026-01-04", {"2026-01-04": stranded})
    assert "apache/airflow#72054" in note and "Mark as failed" in note


def test_a_cleared_date_behind_a_later_run_holding_the_only_slot_says_to_clear_the_future_too():
    """Seen: backfill of 8 dates, max_active_runs 1, date 3 failed; clearing it queued it while date 4
    ran and waited for date 3's ``second`` (depends_on_past): neither moved again."""
    from airflow_provider_dltrain.backfill_report import stall_notes

    newest = {
        "2026-01-02": _bf_run("success", {"first": "success", "second": "success"}),
        "2026-01-03": _bf_run("queued", {"first": "none", "second": "none"}),
        "2026-01-04": _bf_run("running", {"first": "success", "second": "none"}),
        "2026-01-05": _bf_run("queued", {"first": "none", "second": "none"}, started=False),
    }
    (note,) = stall_notes("2026-01-03", newest)
    assert "held by 2026-01-04" in note and "'Future'" in note
    assert stall_notes("2026-01-05", newest) == []  # behind it in date order: it waits its turn
    # with a free slot (max_active_runs 2) the scheduler starts the cleared date itself
    roomy = {ds: {**run, "backfill": {**run["backfill"], "max_active_runs": 2}} for ds, run in newest.items()}
    assert stall_notes("2026-01-03", roomy) == []


def test_a_model_change_shows_the_part_of_the_model_uri_that_differs(tmp_path):
    uri = str(tmp_path / "t")
    base = f"file://{tmp_path}/mlruns/1"
    _write(uri, "a" * 64, **{"dltrain.model_uri": f"{base}/0123abcd/artifacts/model"})
    _write(uri, "b" * 64, try_number=2, **{"dltrain.model_uri": f"{base}/4567ef01/artifacts/model"})
    (change,) = explain(DAG, DS, [_run(uri, 1, 2)]).changes
    assert "model …/0123abcd/… → …/4567ef01/…" in change


def test_a_trained_model_whose_run_cannot_be_read_is_unknown_never_reproduced(tmp_path):
    """A TrainResult whose MLflow run this report cannot read (no store given, or the store refuses)
    may have trained: the report says it cannot tell, instead of "nothing committed, trained or submitted"."""
    from airflow_provider_dltrain.store.config import TrackingConfig

    trained = {"run_id": "0123456789abcdef", "code_hash": "c" * 16, "model_uri": "models:/m/1"}
    run = {
        "run_id": RUN,
        "state": "success",
        "tasks": {"train": "success"},
        "tries": {"train": {"try_number": 2, "start": "2026-11-26T00:00:00+00:00"}},
        "xcom": {"train": trained},
        "jobs": {},
    }
    report = explain(DAG, DS, [run])
    assert report.verdict == "unknown", report
    assert report.notes == [
        "train returned a trained model, but no MLflow store was given to read its run 0123456789abcdef: "
        "whether that try trained cannot be told"
    ]
    # a store that does not hold the run (deleted since): nothing to compare with, as before
    store = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert explain(DAG, DS, [run], store).verdict == "reproduced"


def test_the_plugin_reads_mlflow_and_the_lake_through_the_connections_the_tasks_use(monkeypatch):
    from airflow_provider_dltrain.backfill_views import stores

    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_DEFAULT",
        json.dumps({"conn_type": "mlflow", "host": "http://mlflow:5000", "login": "admin", "password": "pw"}),
    )
    monkeypatch.setenv("DLTRAIN_AWS_CONN_ID", "aws_lake")
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_LAKE",
        json.dumps(
            {"conn_type": "aws", "login": "AKIA", "password": "s3cret", "extra": {"region_name": "eu-west-1"}}
        ),
    )
    tracking, options = stores()
    assert tracking.tracking_uri == "http://mlflow:5000"
    assert tracking.env.get("MLFLOW_TRACKING_USERNAME") == "admin"
    assert (
        options is not None
        and options["AWS_ACCESS_KEY_ID"] == "AKIA"
        and options["AWS_REGION"] == "eu-west-1"
    )
    monkeypatch.delenv("AIRFLOW_CONN_AWS_LAKE")
    monkeypatch.delenv("AIRFLOW_CONN_MLFLOW_DEFAULT")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://elsewhere:5000")
    tracking, options = stores()
    assert options is None and tracking.tracking_uri == "http://elsewhere:5000"
