"""DeltaTableVersionTrigger: serialisation, and its async loop against a real table."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from airflow_provider_dltrain.triggers import DeltaTableVersionTrigger


def _first_event(trigger: DeltaTableVersionTrigger, timeout: float = 30.0):
    async def first():
        return await asyncio.wait_for(anext(trigger.run()), timeout)

    return asyncio.run(first())


ENGINE_JOB = {
    "engine": "emr",
    "handle": {
        "engine": "emr",
        "ids": {"cluster_id": "j-1", "step_id": "s-1"},
        "result_uri": "s3://b/r.json",
    },
    "engine_options": {"staging_uri": "s3://b/st", "cluster_id": "j-1"},
    "aws_conn_id": "aws_lake",
    "region_name": "eu-west-1",
    "poll_interval": 5.0,
}


@pytest.mark.parametrize(
    ("classpath", "kwargs"),
    [
        ("airflow_provider_dltrain.triggers.delta.DeltaTableVersionTrigger", {"table_uri": "/data/events"}),
        (
            "airflow_provider_dltrain.triggers.delta.DeltaTableVersionTrigger",
            {
                "table_uri": "s3://lake/events",
                "min_version": 3,
                "partition": {"ds": "2026-11-28"},
                "newer_than": {
                    "uri": "s3://lake/events",
                    "version": 2,
                    "timestamp": "2026-11-28T02:00:00+00:00",
                },
                "aws_conn_id": "aws_lake",
                "poll_interval": 5.0,
            },
        ),
        ("airflow_provider_dltrain.triggers.engines.EngineJobTrigger", ENGINE_JOB),
        (
            "airflow_provider_dltrain.triggers.delta.DeltaTableNewVersionTrigger",
            {
                "table_uri": "s3://lake/events",
                "from_version": 3,
                "aws_conn_id": "aws_lake",
                "poll_interval": 5.0,
            },
        ),
    ],
    ids=["delta-defaults", "delta-every-condition", "engine-job", "delta-new-version-watcher"],
)
def test_every_trigger_survives_serialize_deserialize_round_trip(classpath, kwargs):
    module, _, name = classpath.rpartition(".")
    trigger = getattr(importlib.import_module(module), name)(**kwargs)

    serialized_path, serialized = trigger.serialize()
    rebuilt = getattr(importlib.import_module(module), name)(**serialized)

    assert rebuilt.serialize() == (serialized_path, serialized)
    assert serialized_path == classpath
    assert {k: serialized[k] for k in kwargs} == kwargs


def test_trigger_kwargs_hold_a_connection_id_never_credentials():
    _, serialized = DeltaTableVersionTrigger(table_uri="s3://lake/t", aws_conn_id="aws_lake").serialize()

    assert set(serialized) == {
        "table_uri",
        "min_version",
        "partition",
        "newer_than",
        "aws_conn_id",
        "poll_interval",
    }


def test_trigger_fires_with_the_ref_of_a_version_that_meets_the_conditions(table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    added = write_version(table_uri, "2026-11-28")
    trigger = DeltaTableVersionTrigger(
        table_uri=table_uri,
        min_version=1,
        partition={"ds": "2026-11-28"},
        aws_conn_id=None,
        poll_interval=0.05,
    )

    event = _first_event(trigger)

    assert event.payload == {"status": "success", "ref": added.to_dict()}


def test_trigger_keeps_waiting_then_fires_on_the_commit_that_meets_the_conditions(table_uri, write_version):
    first = write_version(table_uri, "2026-11-27")
    trigger = DeltaTableVersionTrigger(
        table_uri=table_uri, newer_than=first.to_dict(), aws_conn_id=None, poll_interval=0.05
    )

    async def scenario():
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.4)
        assert not waiting.done(), "fired before any newer version existed"
        newer = await asyncio.to_thread(write_version, table_uri, "2026-11-28")
        return newer, await asyncio.wait_for(waiting, 30)

    newer, event = asyncio.run(scenario())

    assert event.payload["status"] == "success"
    assert event.payload["ref"]["version"] == newer.version == first.version + 1


def test_trigger_reports_an_invalid_condition_as_a_non_retryable_error(table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    trigger = DeltaTableVersionTrigger(
        table_uri=table_uri, newer_than={"uri": "/some/other/table", "version": 0}, aws_conn_id=None
    )

    event = _first_event(trigger)

    assert event.payload["status"] == "error"
    assert event.payload["retryable"] is False
    assert "/some/other/table" in event.payload["message"]


def test_trigger_reports_an_unreadable_table_as_a_retryable_error(table_uri, monkeypatch):
    from airflow_provider_dltrain.hooks.delta import DeltaTableHook

    def unreachable(self, *args, **kwargs):
        raise ConnectionError("endpoint unreachable")

    monkeypatch.setattr(DeltaTableHook, "check_version", unreachable)

    event = _first_event(DeltaTableVersionTrigger(table_uri=table_uri, aws_conn_id=None))

    assert event.payload == {
        "status": "error",
        "message": "ConnectionError: endpoint unreachable",
        "retryable": True,
    }


def test_trigger_finds_an_s3_table_on_moto_through_the_aws_connection(
    aws_moto_conn, s3_bucket, write_version
):
    bucket, storage_options = s3_bucket
    uri = f"s3://{bucket}/events"
    added = write_version(uri, "2026-11-28", storage_options=storage_options)
    trigger = DeltaTableVersionTrigger(
        table_uri=uri, partition={"ds": "2026-11-28"}, aws_conn_id=aws_moto_conn, poll_interval=0.05
    )

    event = _first_event(trigger)

    assert event.payload == {"status": "success", "ref": added.to_dict()}
