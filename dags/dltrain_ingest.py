"""Nightly ingest: the day's landed digit images → one partition of the ``digits`` Delta table.

Runs on a ``CronDataIntervalTimetable`` so every run (scheduled, backfilled or re-run) covers
[D, D+1) and writes partition ``ds = D`` taken from ``data_interval_start``. Re-running a date
replaces exactly that partition; broken files go to ``digits_quarantine`` with a reason. A run whose
landing files (names, sizes, modification times), code and parameters are those the partition was
last written from starts no Spark and returns that version; trigger with ``{"force": true}`` to
compute it anyway.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.operators.spark import DeltaWriteOptions, SparkToDeltaOperator

DS = "{{ data_interval_start | ds }}"
DIGITS = paths.table("digits")
DIGITS_ASSET = Asset(name="dltrain_digits", uri=paths.asset_uri(DIGITS))
POLL = paths.poll_intervals(ingest=15.0)

with DAG(
    dag_id="dltrain_ingest",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=2,  # each run writes its own partition: dates side by side commit independently
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={"force": Param(False, type="boolean", description="ingest even when the inputs are unchanged")},
    tags=["dltrain", "ingest"],
    doc_md=__doc__,
):
    SparkToDeltaOperator(
        task_id="ingest_images",
        table_uri=DIGITS,
        partition={"ds": DS},
        transform="airflow_provider_dltrain.demo.digits_etl:decode_digits",
        inputs={
            "images": {
                "path": f"{paths.landing()}/{DS}/images",
                "format": "binaryFile",
                "options": {"pathGlobFilter": "*.png"},
            },
            "labels": {"path": f"{paths.landing()}/{DS}/labels.csv", "format": "csv"},
        },
        write=DeltaWriteOptions(max_bad_fraction=0.05, num_files=2, partition_formats={"ds": "date"}),
        engine=paths.engine(),
        engine_options=paths.engine_options(),
        poll_interval=POLL["ingest"],
        aws_conn_id=paths.aws_conn_id(),
        force="{{ params.force }}",
        outlets=[DIGITS_ASSET],
    )
