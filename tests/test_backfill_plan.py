"""The backfill plan decides each date as the DAG's own tasks decide when they run (no Spark, no Airflow DB).

An ingest DAG with ``SparkToDeltaOperator`` on real Delta tables in ``tmp_path``: its "nightly" runs
make the operator's own decision (``rerun_check`` on its ``run_spec`` for the date) and commit what the
ETL stage commits (rows from the transform, the recorded facts, the quarantine pairing), without Spark.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from airflow.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.backfill_plan import format_plan, plan_backfill, run_context
from airflow_provider_dltrain.operators import SparkToDeltaOperator
from airflow_provider_dltrain.plan_tasks import rendered
from benchmarks.history_year import TRANSFORM, transform

START = date(2026, 3, 1)
DS = "{{ data_interval_start | ds }}"


def _ds(day: int) -> str:
    return (START + timedelta(days=day)).isoformat()


def _land(landing, day: int, shift: float = 0.0) -> None:
    folder = os.path.join(landing, f"ds={_ds(day)}")
    os.makedirs(folder, exist_ok=True)
    values = [str(k + shift) for k in range(7)]
    values[6 - int(shift * 2)] = "n/a"  # another bad row when restated: the helper's quarantine commits
    rows = pa.table({"id": list(range(7)), "value": values, "label": [k % 3 for k in range(7)]})
    pcsv.write_csv(rows, os.path.join(folder, "part-0.csv"))


GLUE = {"staging_uri": "s3://staging/dltrain", "role": "GlueJobRole"}


def _ingest_dag(tmp_path, engine: str = "local") -> DAG:
    with DAG(
        "plan_ingest",
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
        start_date=datetime(2026, 1, 1),
    ) as dag:
        SparkToDeltaOperator(
            task_id="ingest",
            transform=TRANSFORM,
            inputs={"raw": os.path.join(tmp_path, "landing", "ds=" + DS)},
            table_uri=str(tmp_path / "lake" / "images"),
            partition={"ds": DS},
            engine=engine,
            engine_options=GLUE if engine == "glue" else None,
        )
    return dag


def _ingest(dag: DAG, ds: str) -> int | None:
    """One run of the ingest task for ``ds``: the operator's decision, then the stage's commits."""
    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.etl.writer import default_quarantine_uri
    from airflow_provider_dltrain.lake.pairing import META_ROWS_QUARANTINED, pairing_metadata

    task, context = rendered(dag.get_task("ingest"), run_context(dag, ds, None), {})
    spec = task.run_spec(context)
    check = task.rerun_check(spec)
    if check.skipped:
        return None
    raw = pcsv.read_csv(
        os.path.join(spec.params["inputs"]["raw"], "part-0.csv"),
        convert_options=pcsv.ConvertOptions(column_types={"value": pa.string()}),
    )
    good, bad = transform(raw)
    meta = {**spec.metadata, **check.metadata(), META_ROWS_QUARANTINED: str(bad.num_rows)}
    ref = lake.overwrite_partition(spec.table_uri, good, {"ds": ds}, metadata=meta)
    digest = lake.partition_digest(spec.table_uri, ref.version, {"ds": ds}, None)
    pair = pairing_metadata(spec.table_uri, {"ds": ds}, digest, None)
    quarantine = default_quarantine_uri(spec.table_uri)
    lake.overwrite_partition(quarantine, bad, {"ds": ds}, metadata={**spec.metadata, **(pair or {})})
    return ref.version


@pytest.fixture
def nightly(tmp_path):
    """Three nights ingested; then night 1's landing files are restated with other values."""
    dag = _ingest_dag(tmp_path)
    for day in range(3):
        _land(tmp_path / "landing", day)
        assert _ingest(dag, _ds(day)) is not None
    _land(tmp_path / "landing", 1, shift=0.5)
    return dag


def test_the_plan_names_the_restated_date_as_will_recompute_and_the_backfill_does_exactly_that(nightly):
    plan = plan_backfill(nightly, START, START + timedelta(days=2))
    assert [d.verdict for d in plan.dates] == ["will skip", "will recompute", "will skip"]
    (ingest,) = plan.dates[1].tasks
    assert ingest.decision == "run" and "changed since version" in ingest.reason
    (change,) = ingest.changes
    assert change["fact"] == "inputs.raw" and change["before"] != change["after"]
    skipped = plan.dates[0].tasks[0]
    assert skipped.since["version"] == 0 and skipped.since["run_id"] == f"plan__{_ds(0)}T00:00:00+00:00"
    assert plan.totals["spark_stages"] == 1 and plan.totals["cloud_jobs"] == 0
    assert plan.totals["will recompute"] == 1 and plan.totals["will skip"] == 2
    # the backfill: each date decides and commits as the operator does; what it did is what the plan said
    did = [_ingest(nightly, d.ds) is not None for d in plan.dates]
    assert did == [d.verdict == "will recompute" for d in plan.dates]
    after = plan_backfill(nightly, START, START + timedelta(days=2))
    assert [d.verdict for d in after.dates] == ["will skip"] * 3


def test_the_plan_text_names_the_changed_fact_and_the_cost(nightly):
    text = format_plan(plan_backfill(nightly, START, START + timedelta(days=1)))
    assert f"{_ds(1)}  will recompute (no run yet)" in text and "inputs.raw: " in text
    assert f"{_ds(0)}  will skip (no run yet)" in text and "unchanged since version 0" in text
    assert text.endswith("1 will skip, 1 will recompute; 0 training(s), 0 cloud job(s), 1 Spark stage(s)")


def test_a_date_whose_run_is_busy_or_failed_says_so_and_what_its_rerun_does(nightly):
    runs = {
        _ds(0): [{"run_id": "scheduled__0", "state": "running"}],
        _ds(1): [{"run_id": "scheduled__1", "state": "success"}, {"run_id": "manual__1", "state": "failed"}],
    }
    plan = plan_backfill(nightly, START, START + timedelta(days=2), runs=runs)
    assert [d.verdict for d in plan.dates] == ["in progress", "failed", "will skip"]
    assert plan.dates[1].run == {"run_id": "manual__1", "state": "failed"}
    assert plan.dates[1].tasks[0].decision == "run"  # the re-run of the failed date recomputes


def test_a_cloud_engine_counts_a_cloud_job_per_recomputed_stage(tmp_path, nightly):
    cloud = _ingest_dag(tmp_path, engine="glue")
    plan = plan_backfill(cloud, START, START + timedelta(days=2))
    assert plan.totals["cloud_jobs"] == 1 and plan.totals["spark_stages"] == 1


def test_a_date_whose_inputs_cannot_be_rendered_or_read_is_planned_to_recompute_naming_why(tmp_path):
    dag = _ingest_dag(tmp_path)  # nothing landed, nothing ingested
    (d,) = plan_backfill(dag, START, START).dates
    assert d.verdict == "will recompute"
    assert "its facts could not be established" in d.tasks[0].reason or "no listing" in d.tasks[0].reason


def test_a_plan_asks_each_question_once_and_a_run_outside_it_asks_again():
    from airflow_provider_dltrain.utils.snapshot import remembered, snapshot

    asked = []

    def ask():
        asked.append(1)
        return len(asked)

    assert [remembered("q", ask), remembered("q", ask)] == [1, 2]  # a task's own run reads afresh
    with snapshot():
        assert [remembered("q", ask), remembered("q", ask)] == [3, 3]
    assert remembered("q", ask) == 4


def test_a_plan_keeps_each_tasks_info_lines_out_of_the_log_and_its_warnings_in(nightly):
    """A year's plan would log each task's "pinned ..." and "model ... resolved" once per date (730
    lines, about half the plan's time); the rendered copies log warnings only, the DAG's tasks as before."""
    import logging

    from airflow_provider_dltrain.plan_tasks import QUIET

    task = nightly.get_task("ingest")
    mine, _ = rendered(task, run_context(nightly, _ds(0), None), {})
    assert mine.log is QUIET and not mine.log.isEnabledFor(logging.INFO)
    assert mine.log.isEnabledFor(logging.WARNING) and task.log is not QUIET
