"""DeltaTableVersionSensor(pin="cutoff"): hand on the newest version that changed any partition <= D."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_dltrain.airflow_compat import TaskDeferred
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from airflow_provider_dltrain.sensors.delta import PINS


def sensor(**kwargs) -> DeltaTableVersionSensor:
    kwargs.setdefault("aws_conn_id", None)
    kwargs.setdefault("poll_interval", 0.05)
    kwargs.setdefault("timeout", 30)
    return DeltaTableVersionSensor(task_id="wait_for_events", **kwargs)


def test_cutoff_is_one_of_the_pins():
    assert "cutoff" in PINS


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
def test_pin_cutoff_hands_on_the_newest_version_that_changed_a_partition_up_to_the_date(
    deferrable, table_uri, write_version
):
    for ds in ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"):
        write_version(table_uri, ds)
    cutoff = sensor(table_uri=table_uri, partition={"ds": "2026-11-03"}, pin="cutoff", deferrable=deferrable)
    assert cutoff.execute(context={})["version"] == 2
    restated = write_version(table_uri, "2026-11-02")  # an earlier day restated
    write_version(table_uri, "2026-11-05")  # a later day appended
    assert cutoff.execute(context={})["version"] == restated.version == 4
    partition_only = sensor(
        table_uri=table_uri, partition={"ds": "2026-11-03"}, pin="partition_commit", deferrable=deferrable
    )
    assert partition_only.execute(context={})["version"] == 2


def test_pin_cutoff_in_poke_mode_returns_the_cutoff_as_the_xcom(table_uri, write_version):
    write_version(table_uri, "2026-11-01")
    restated = write_version(table_uri, "2026-11-01")
    write_version(table_uri, "2026-11-02")
    task = sensor(table_uri=table_uri, partition={"ds": "2026-11-01"}, pin="cutoff")
    result = task.poke({})
    assert result.is_done and result.xcom_value == restated.to_dict()


def test_pin_cutoff_after_a_deferred_wait_pins_from_the_version_the_trigger_found(table_uri, write_version):
    write_version(table_uri, "2026-11-01")
    task = sensor(table_uri=table_uri, partition={"ds": "2026-11-03"}, pin="cutoff", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({})
    write_version(table_uri, "2026-11-02")
    found = write_version(table_uri, "2026-11-03")

    event = asyncio.run(anext(deferred.value.trigger.run()))
    write_version(table_uri, "2026-11-02")  # restated after the trigger fired: not in its version
    result = task.resume_execution("execute_complete", {"event": event.payload}, {})

    assert result == found.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a partition"),
        (
            {"partition": {"ds": "2026-11-28"}, "newer_than": {"uri": "/x", "version": 1}},
            "cannot be combined",
        ),
    ],
)
def test_pin_cutoff_without_a_partition_or_with_a_version_floor_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sensor(table_uri="/tmp/x", pin="cutoff", **kwargs)
