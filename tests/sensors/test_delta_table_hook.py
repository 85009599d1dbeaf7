"""DeltaTableHook: the one predicate behind the sensor and the trigger, and its storage options."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.exceptions import InvalidPartitionError, InvalidSpecError
from airflow_provider_dltrain.hooks.delta import DeltaTableHook, VersionConditions
from airflow_provider_dltrain.lake.log import DeltaLog


@pytest.fixture
def hook() -> DeltaTableHook:
    return DeltaTableHook(aws_conn_id=None)


def test_no_version_is_found_before_the_table_exists(hook, table_uri):
    check = hook.check_version(table_uri)

    assert check.ref is None and check.latest is None
    assert "does not exist" in check.summary()


def test_without_conditions_the_newest_version_is_returned(hook, table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    newest = write_version(table_uri, "2026-11-28")

    found = hook.find_version(table_uri)

    assert found == newest
    assert found.timestamp is not None


def test_min_version_is_met_only_once_that_version_is_committed(hook, table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    assert hook.find_version(table_uri, min_version=1) is None
    assert "version >= 1" in hook.check_version(table_uri, min_version=1).summary()

    v1 = write_version(table_uri, "2026-11-28")

    assert hook.find_version(table_uri, min_version=1) == v1
    assert hook.find_version(table_uri, min_version=0) == v1  # the newest, not the lowest allowed


def test_newer_than_waits_for_a_commit_after_the_given_ref(hook, table_uri, write_version):
    seen = write_version(table_uri, "2026-11-27")
    assert hook.find_version(table_uri, newer_than=seen) is None

    newer = write_version(table_uri, "2026-11-27")

    assert hook.find_version(table_uri, newer_than=seen.to_dict()) == newer
    assert hook.find_version(table_uri, newer_than=seen.to_json()) == newer
    assert hook.find_version(table_uri, newer_than=str(seen.to_dict())) == newer  # a rendered template


def test_partition_condition_is_met_by_the_version_that_adds_it(hook, table_uri, write_version):
    write_version(table_uri, "2026-11-27")
    assert hook.find_version(table_uri, partition={"ds": "2026-11-28"}) is None

    added = write_version(table_uri, "2026-11-28")

    assert hook.find_version(table_uri, partition={"ds": "2026-11-28"}) == added


def test_a_partition_deleted_since_does_not_count(hook, table_uri, write_version):
    from deltalake import DeltaTable

    write_version(table_uri, "2026-11-27")
    write_version(table_uri, "2026-11-28")
    DeltaTable(table_uri).delete("ds = '2026-11-28'")

    assert hook.find_version(table_uri, partition={"ds": "2026-11-28"}) is None
    assert hook.find_version(table_uri, partition={"ds": "2026-11-27"}).version == 2


def test_partition_answers_match_delta_rs_across_checkpoints_removes_and_deletes(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from airflow_provider_dltrain.lake import overwrite_partition

    uri = str(tmp_path / "t")
    config = {"delta.checkpointInterval": "3"}
    write_deltalake(uri, pa.table({"x": [0], "ds": ["a"]}), partition_by=["ds"], configuration=config)
    for ds in ["b", "a", "c", "b", "a", "d", "c"]:  # overwrites remove the previous file of that date
        overwrite_partition(uri, pa.table({"x": [1]}), {"ds": ds})
    DeltaTable(uri).delete("ds = 'b'")
    newest = DeltaLog(uri).latest_version()
    assert DeltaLog(uri).last_checkpoint() is not None

    for version in range(newest + 1):
        for ds in ["a", "b", "c", "d", "e"]:
            expected = bool(DeltaTable(uri, version=version).file_uris([("ds", "=", ds)]))
            fast = DeltaLog(uri).has_partition(version, [("ds", ds)])
            assert fast is not None, (version, ds)
            assert fast == expected, (version, ds)


def test_multi_column_partitions_match_only_when_every_value_matches(hook, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    config = {"delta.checkpointInterval": "2"}
    rows = pa.table({"x": [1, 2], "ds": ["d1", "d2"], "region": ["eu", "us"]})
    write_deltalake(uri, rows, partition_by=["ds", "region"], configuration=config)
    write_deltalake(uri, rows.slice(0, 1), mode="append")  # version 1 is a checkpoint

    assert hook.find_version(uri, partition={"ds": "d1", "region": "eu"}) is not None
    assert hook.find_version(uri, partition={"region": "us"}) is not None
    assert hook.find_version(uri, partition={"ds": "d1", "region": "us"}) is None


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"min_version": -1}, InvalidSpecError, "min_version"),
        ({"min_version": True}, InvalidSpecError, "min_version"),
        ({"partition": {"ds": ""}}, InvalidPartitionError, "ds"),
        ({"partition": {}}, InvalidPartitionError, "partition"),
        ({"newer_than": {"uri": "/elsewhere", "version": 1}}, InvalidSpecError, "/elsewhere"),
        ({"newer_than": {"version": 1}}, InvalidSpecError, "uri"),
        ({"newer_than": "{not a ref"}, InvalidSpecError, "newer_than"),
    ],
)
def test_invalid_conditions_are_refused_naming_the_field(hook, table_uri, kwargs, error, names):
    with pytest.raises(error, match=names):
        hook.check_version(table_uri, **kwargs)


def test_conditions_describe_themselves_and_survive_json(table_uri):
    import json

    conditions = VersionConditions.parse(
        table_uri, 3, {"ds": "2026-11-28"}, {"uri": table_uri, "version": 4, "timestamp": None}
    )

    assert conditions.floor == 5
    assert conditions.describe() == (
        "version >= 3, newer than version 4, partition {'ds': '2026-11-28'} present"
    )
    again = json.loads(json.dumps(conditions.to_kwargs()))
    assert VersionConditions.parse(**again) == conditions


def test_latest_version_ignores_an_at_least_hint_beyond_the_table(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"x": [0]}), configuration={"delta.checkpointInterval": "2"})
    for i in range(3):
        write_deltalake(uri, pa.table({"x": [i]}), mode="append")

    assert DeltaLog(uri).latest_version(at_least=50) == 3
    assert DeltaLog(uri).latest_version(at_least=2) == 3


# -- storage options ----------------------------------------------------------------------------
def test_local_tables_need_no_storage_options():
    assert DeltaTableHook(aws_conn_id="never_looked_up").get_storage_options("/data/events") == {}


def test_s3_options_come_from_the_aws_connection_with_its_endpoint(aws_moto_conn, moto_server):
    options = DeltaTableHook(aws_conn_id=aws_moto_conn).get_storage_options("s3://bucket/events")

    assert options["AWS_ACCESS_KEY_ID"] == "testing"
    assert options["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert options["AWS_ENDPOINT_URL"] == moto_server
    assert options["AWS_ALLOW_HTTP"] == "true"
    assert options["AWS_REGION"] == "us-east-1"
    assert options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "true"


def test_unsafe_rename_is_never_set_unless_the_connection_asks(monkeypatch):
    import json

    conn = {"conn_type": "aws", "login": "k", "password": "s", "extra": {"region_name": "eu-west-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_PROD", json.dumps(conn))

    options = DeltaTableHook(aws_conn_id="aws_prod").get_storage_options("s3://bucket/events")

    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in options
    assert "AWS_ENDPOINT_URL" not in options
    assert options["AWS_REGION"] == "eu-west-1"


def test_connection_extra_passes_delta_options_through_and_explicit_options_win(monkeypatch):
    import json

    extra = {
        "delta_storage_options": {"AWS_S3_LOCKING_PROVIDER": "dynamodb", "DELTA_DYNAMO_TABLE_NAME": "locks"}
    }
    conn = {"conn_type": "aws", "login": "k", "password": "s", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LOCKED", json.dumps(conn))
    hook = DeltaTableHook(aws_conn_id="aws_locked", storage_options={"DELTA_DYNAMO_TABLE_NAME": "other"})

    options = hook.get_storage_options("s3://bucket/events")

    assert options["AWS_S3_LOCKING_PROVIDER"] == "dynamodb"
    assert options["DELTA_DYNAMO_TABLE_NAME"] == "other"


def test_s3_table_on_moto_is_found_through_the_aws_connection(aws_moto_conn, s3_bucket, write_version):
    bucket, storage_options = s3_bucket
    uri = f"s3://{bucket}/events"
    hook = DeltaTableHook(aws_conn_id=aws_moto_conn)
    assert hook.find_version(uri, partition={"ds": "2026-11-28"}) is None

    write_version(uri, "2026-11-27", storage_options=storage_options)
    assert hook.find_version(uri, partition={"ds": "2026-11-28"}) is None
    added = write_version(uri, "2026-11-28", storage_options=storage_options)

    assert hook.find_version(uri, min_version=1, partition={"ds": "2026-11-28"}) == added
    assert added.uri == uri


def test_unusual_log_layouts_fall_back_to_delta_rs(hook, table_uri, write_version, monkeypatch):
    write_version(table_uri, "2026-11-27")
    monkeypatch.setattr(DeltaLog, "has_partition", lambda self, version, wanted: None)

    assert hook.find_version(table_uri, partition={"ds": "2026-11-27"}) is not None
    assert hook.find_version(table_uri, partition={"ds": "2026-11-28"}) is None
