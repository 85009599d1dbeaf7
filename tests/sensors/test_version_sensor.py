"""DeltaTableVersionSensor: poke and deferrable modes, timeouts and errors, on real tables."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from airflow_provider_dltrain.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    TaskDeferred,
)
from airflow_provider_dltrain.exceptions import InvalidPartitionError
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from airflow_provider_dltrain.triggers import DeltaTableVersionTrigger


def sensor(**kwargs) -> DeltaTableVersionSensor:
    kwargs.setdefault("aws_conn_id", None)
    kwargs.setdefault("poll_interval", 0.05)
    kwargs.setdefault("timeout", 30)
    return DeltaTableVersionSensor(task_id="wait_for_events", **kwargs)


@pytest.mark.parametrize(
    ("condition", "met_by"),
    [
        ({"min_version": 2}, "2026-11-28"),
        ({"partition": {"ds": "2026-11-29"}}, "2026-11-29"),
        ("newer_than", "2026-11-28"),
    ],
    ids=["min_version", "partition", "newer_than"],
)
def test_poke_succeeds_exactly_when_each_condition_first_holds(condition, met_by, table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    v1 = write_version(table_uri, "2026-11-27")
    task = sensor(table_uri=table_uri, **({"newer_than": v1} if condition == "newer_than" else condition))
    assert task.poke({}) is False

    for ds in ("2026-11-28", "2026-11-29"):
        written = write_version(table_uri, ds)
        result = task.poke({})
        if ds != met_by:
            assert result is False, f"fired on version {written.version} before the condition held"
            continue
        assert result.is_done
        assert result.xcom_value == written.to_dict()
        break


def test_poke_mode_returns_the_ref_of_the_version_committed_while_waiting(table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    task = sensor(table_uri=table_uri, partition={"ds": "2026-11-28"}, min_version=1)
    committed = []
    writer = threading.Timer(0.3, lambda: committed.append(write_version(table_uri, "2026-11-28")))
    writer.start()
    try:
        result = task.execute({})
    finally:
        writer.join()

    assert result == committed[0].to_dict()
    assert result["version"] == 1


def test_deferrable_sensor_defers_to_the_trigger_with_its_conditions(table_uri, write_version):
    seen = write_version(table_uri, "2026-11-27")
    task = sensor(
        table_uri=table_uri,
        partition={"ds": "2026-11-28"},
        newer_than=seen,
        min_version=1,
        deferrable=True,
        aws_conn_id="aws_lake",
        poll_interval=7,
        timeout=600,
    )

    with pytest.raises(TaskDeferred) as deferred:
        task.execute({})

    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaTableVersionTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=600)
    assert trigger.serialize()[1] == {
        "table_uri": table_uri,
        "min_version": 1,
        "partition": {"ds": "2026-11-28"},
        "newer_than": seen.to_dict(),
        "aws_conn_id": "aws_lake",
        "poll_interval": 7.0,
    }


def test_deferrable_sensor_does_not_defer_when_the_version_is_already_there(table_uri, write_version):
    ready = write_version(table_uri, "2026-11-28")

    result = sensor(table_uri=table_uri, partition={"ds": "2026-11-28"}, deferrable=True).execute({})

    assert result == ready.to_dict()


def test_deferred_wait_ends_with_the_ref_the_trigger_found(table_uri, write_version):
    import asyncio

    write_version(table_uri, "2026-11-27")
    task = sensor(table_uri=table_uri, partition={"ds": "2026-11-28"}, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({})
    added = write_version(table_uri, "2026-11-28")

    event = asyncio.run(anext(deferred.value.trigger.run()))
    result = task.resume_execution("execute_complete", {"event": event.payload}, {})

    assert result == added.to_dict()


def test_execute_complete_fails_without_retry_on_a_non_retryable_error_event(table_uri):
    event = {"status": "error", "message": "InvalidSpecError: newer_than refers to /x", "retryable": False}

    with pytest.raises(AirflowFailException, match=f"{table_uri}.*newer_than refers to /x"):
        sensor(table_uri=table_uri).execute_complete({}, event)


def test_execute_complete_raises_a_retryable_error_on_a_read_failure(table_uri):
    event = {"status": "error", "message": "OSError: connection reset", "retryable": True}

    with pytest.raises(AirflowException, match="connection reset") as raised:
        sensor(table_uri=table_uri).execute_complete({}, event)
    assert not isinstance(raised.value, AirflowFailException)


def test_execute_complete_refuses_an_unrecognisable_event(table_uri):
    with pytest.raises(AirflowException, match="no recognisable event"):
        sensor(table_uri=table_uri).execute_complete({}, {"state": "weird"})


def test_poke_mode_timeout_names_the_table_and_the_unmet_conditions(table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    task = sensor(table_uri=table_uri, min_version=5, partition={"ds": "2026-11-28"}, timeout=0.3)

    with pytest.raises(AirflowSensorTimeout) as raised:
        task.execute({})

    message = str(raised.value)
    assert table_uri in message
    assert "version >= 5" in message and "{'ds': '2026-11-28'}" in message
    assert "newest version 0" in message


def test_deferrable_timeout_names_the_table_and_the_unmet_conditions(table_uri, write_version):
    from airflow.sdk.bases.operator import TriggerFailureReason

    write_version(table_uri, "2026-11-27")
    task = sensor(table_uri=table_uri, partition={"ds": "2026-11-28"}, deferrable=True, timeout=60)

    with pytest.raises(AirflowSensorTimeout) as raised:
        task.resume_execution("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, {})

    message = str(raised.value)
    assert table_uri in message and "partition {'ds': '2026-11-28'}" in message
    assert "timeout of 60s" in message


@pytest.mark.parametrize(
    "kwargs",
    [{"min_version": -1}, {"partition": {"ds": ""}}, {"newer_than": {"uri": "/other", "version": 0}}],
    ids=["negative-min-version", "empty-partition-value", "ref-of-another-table"],
)
@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
def test_invalid_condition_fails_the_task_without_retries(kwargs, deferrable, table_uri):
    if "partition" in kwargs:  # a literal partition value is refused when the DAG file is parsed
        with pytest.raises(InvalidPartitionError, match=r"partition\['ds'\] is empty"):
            sensor(table_uri=table_uri, deferrable=deferrable, timeout=5, **kwargs)
        return
    task = sensor(table_uri=table_uri, deferrable=deferrable, timeout=5, **kwargs)

    with pytest.raises(AirflowFailException):
        task.execute({})


def test_templated_fields_render_from_the_context(table_uri):
    from airflow.sdk import DAG

    with DAG("sensor_templates", schedule=None):
        task = DeltaTableVersionSensor(
            task_id="wait",
            table_uri="{{ params.lake }}/events",
            partition={"ds": "{{ ds }}"},
            newer_than="{{ params.seen }}",
        )
    seen = '{"uri": "/lake/events", "version": 3, "timestamp": null}'
    task.render_template_fields({"ds": "2026-11-28", "params": {"lake": "/lake", "seen": seen}})

    assert task.table_uri == "/lake/events"
    assert task.partition == {"ds": "2026-11-28"}
    assert task.newer_than == seen
    assert set(task.template_fields) == {"table_uri", "partition", "newer_than"}


def test_sensor_waits_for_an_s3_table_on_moto_in_both_modes(aws_moto_conn, s3_bucket, write_version):
    import asyncio

    bucket, storage_options = s3_bucket
    uri = f"s3://{bucket}/events"
    write_version(uri, "2026-11-27", storage_options=storage_options)
    deferrable = sensor(
        table_uri=uri, partition={"ds": "2026-11-28"}, aws_conn_id=aws_moto_conn, deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        deferrable.execute({})

    added = write_version(uri, "2026-11-28", storage_options=storage_options)

    poked = sensor(table_uri=uri, partition={"ds": "2026-11-28"}, aws_conn_id=aws_moto_conn).execute({})
    event = asyncio.run(anext(deferred.value.trigger.run()))
    assert poked == added.to_dict()
    assert deferrable.execute_complete({}, event.payload) == added.to_dict()


def test_importing_sensors_and_triggers_loads_no_heavy_library():
    code = (
        "import sys, airflow_provider_dltrain.sensors, airflow_provider_dltrain.triggers, "
        "airflow_provider_dltrain.hooks.delta\n"
        "names = ('deltalake', 'pyarrow', 'torch', 'pyspark', 'boto3', 'mlflow')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("deferrable", [False, True])
def test_pin_partition_commit_hands_on_the_version_that_last_wrote_the_partition(
    deferrable, table_uri, write_version
):
    first = write_version(table_uri, "2026-11-28")
    write_version(table_uri, "2026-11-29")
    write_version(table_uri, "2026-11-30")
    pinned = sensor(
        table_uri=table_uri, partition={"ds": "2026-11-28"}, pin="partition_commit", deferrable=deferrable
    )
    assert pinned.execute(context={})["version"] == first.version
    newest = sensor(table_uri=table_uri, partition={"ds": "2026-11-28"}, deferrable=deferrable)
    assert newest.execute(context={})["version"] == first.version + 2
    restated = write_version(table_uri, "2026-11-28", rows=3)
    assert pinned.execute(context={})["version"] == restated.version


def test_pin_partition_commit_without_a_partition_is_refused_at_parse_time():
    with pytest.raises(ValueError, match="partition"):
        sensor(table_uri="/tmp/x", pin="partition_commit")


def test_pin_partition_commit_with_a_version_floor_is_refused_at_parse_time():
    with pytest.raises(ValueError, match="cannot be combined"):
        sensor(table_uri="/tmp/x", partition={"ds": "2026-11-28"}, pin="partition_commit", min_version=3)
