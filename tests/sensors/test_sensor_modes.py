"""DeltaTableVersionSensor: the mode it waits in for short and long poll intervals.

A ``mode="reschedule"`` sensor whose next poke is due before the scheduler has read the executor's
"success" for the previous exit is failed by Airflow's scheduler ("... finished with state success, but
the task instance's state attribute is running", apache/airflow#71172): a plain BaseSensorOperator at
poke_interval=1 failed so within 40 s under a real scheduler and LocalExecutor. Below
``RESCHEDULE_MIN_INTERVAL`` the sensor waits in poke mode instead; at or above it, reschedule stays.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from airflow.sdk import DAG

from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from airflow_provider_dltrain.sensors.delta import RESCHEDULE_MIN_INTERVAL


def sensor(**kwargs) -> DeltaTableVersionSensor:
    kwargs.setdefault("aws_conn_id", None)
    return DeltaTableVersionSensor(
        task_id="wait", table_uri="/tmp/none", partition={"ds": "2026-11-20"}, **kwargs
    )


def test_the_threshold_is_30_seconds():
    assert RESCHEDULE_MIN_INTERVAL == 30.0


@pytest.mark.parametrize(
    ("interval", "mode"),
    [
        ({"poll_interval": 1}, "poke"),
        ({"poll_interval": 0.05}, "poke"),
        ({"poll_interval": 29.9}, "poke"),
        ({"poke_interval": 1}, "poke"),
        ({"poke_interval": timedelta(seconds=5)}, "poke"),
        ({"poll_interval": 30}, "reschedule"),
        ({"poll_interval": 60}, "reschedule"),
        ({}, "reschedule"),  # the default interval, 60 s
        ({"poke_interval": timedelta(minutes=5)}, "reschedule"),
    ],
    ids=[
        "1s",
        "50ms",
        "29.9s",
        "poke_interval-1s",
        "timedelta-5s",
        "30s",
        "60s",
        "default",
        "timedelta-5min",
    ],
)
def test_reschedule_is_kept_only_at_30_seconds_or_more(interval, mode):
    task = sensor(mode="reschedule", **interval)
    assert task.mode == mode
    assert task.reschedule is (mode == "reschedule")
    # the interval itself is untouched: only the way of waiting changes
    assert task.poke_interval == task.poll_interval


@pytest.mark.parametrize("interval", [1, 60])
def test_poke_mode_is_never_changed(interval):
    assert sensor(mode="poke", poll_interval=interval).mode == "poke"
    assert sensor(poll_interval=interval).mode == "poke"  # BaseSensorOperator's default


def test_a_mode_from_default_args_is_checked_too():
    with DAG("modes", schedule=None, start_date=datetime(2026, 1, 1), default_args={"mode": "reschedule"}):
        short = DeltaTableVersionSensor(
            task_id="short", table_uri="/tmp/none", aws_conn_id=None, poll_interval=1
        )
        long = DeltaTableVersionSensor(
            task_id="long", table_uri="/tmp/none", aws_conn_id=None, poll_interval=120
        )
    assert (short.mode, long.mode) == ("poke", "reschedule")


def test_the_serialized_dag_keeps_the_mode_the_scheduler_acts_on():
    """The scheduler decides from the serialized task whether a poke may be rescheduled."""
    from tests.support.airflow_versions import serialized_round_trip

    with DAG("modes_serialized", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        sensor(mode="reschedule", poll_interval=1)
        DeltaTableVersionSensor(task_id="slow", table_uri="/tmp/none", aws_conn_id=None, mode="reschedule")
    round_trip = serialized_round_trip(dag)
    assert round_trip.get_task("wait").reschedule is False
    assert round_trip.get_task("slow").reschedule is True
