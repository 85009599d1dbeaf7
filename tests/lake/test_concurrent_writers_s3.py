"""Concurrent writers of one partition on S3 (moto server), made safe by delta-rs' conditional put alone."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import CommitConflictError
from airflow_provider_dltrain.lake.storage import filesystem, join

WRITERS = 4
ROUNDS = 10
SCHEMA = pa.schema([("x", pa.int64()), ("ds", pa.string())])


@pytest.fixture
def safe_s3(moto_server):
    """A bucket and storage options with delta-rs' default commit protocol: a conditional put
    (``If-None-Match: *``) of each commit file, which moto enforces. No ``AWS_S3_ALLOW_UNSAFE_RENAME``
    (a copy that overwrites a concurrent commit) and no locking provider.
    """
    import boto3

    bucket = f"dltrain-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    options = lake.s3_storage_options(
        access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=moto_server
    )
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in options and "AWS_S3_LOCKING_PROVIDER" not in options
    return client, bucket, options


def _spark_like_write(uri, options, ds, rows):
    """Write a Parquet file into the partition as an executor would, then commit it."""
    fs, root = filesystem(uri, options)
    rel = f"ds={ds}/part-{uuid.uuid4().hex[:8]}.parquet"
    with fs.open_output_stream(join(root, rel)) as stream:
        pq.write_table(pa.table({"x": rows}), stream)
    size = fs.get_file_info(join(root, rel)).size
    written = lake.WrittenFile(
        rel, size, len(rows), json.dumps({"numRecords": len(rows)}), int(time.time() * 1000)
    )
    return lake.commit_files(
        uri, [written], SCHEMA, {"ds": ds}, partition_by=["ds"], storage_options=options
    ).ref


def _writer(uri, options, round_, i, barrier, outcomes):
    ds = f"2026-12-{round_ + 1:02d}"
    rows = [i * 1000 + round_ * 10 + k for k in range(3)]  # distinct rows per writer and round
    barrier.wait()
    try:
        if round_ % 2:  # both commit routes: files written by an executor, and a predicate overwrite
            outcomes[i] = _spark_like_write(uri, options, ds, rows)
        else:
            outcomes[i] = lake.overwrite_partition(
                uri, pa.table({"x": rows}), {"ds": ds}, storage_options=options
            )
    except CommitConflictError as err:
        outcomes[i] = err


def test_four_writers_of_one_partition_leave_exactly_one_writers_rows_every_round(safe_s3, caplog):
    caplog.set_level(logging.INFO, logger="airflow_provider_dltrain.lake.commit")
    client, bucket, options = safe_s3
    uri = f"s3://{bucket}/tables/t"
    lake.overwrite_partition(uri, pa.table({"x": [-1]}), {"ds": "2026-11-01"}, storage_options=options)
    for round_ in range(ROUNDS):
        ds = f"2026-12-{round_ + 1:02d}"
        barrier = threading.Barrier(WRITERS)
        outcomes: dict[int, object] = {}

        threads = [
            threading.Thread(target=_writer, args=(uri, options, round_, i, barrier, outcomes))
            for i in range(WRITERS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(outcomes) == WRITERS, f"round {round_}: a writer neither succeeded nor failed cleanly"
        for outcome in outcomes.values():
            if isinstance(outcome, CommitConflictError):
                assert "concurrent writer" in str(outcome)
        refs = [o for o in outcomes.values() if isinstance(o, lake.DeltaRef)]
        assert refs, f"round {round_}: no writer committed"
        # every success is its own commit: no two writers believe they made the same version
        assert len({r.version for r in refs}) == len(refs)
        got = sorted(
            r["x"]
            for r in lake.open_table(uri, None, options).to_pyarrow_table().to_pylist()
            if r["ds"] == ds
        )
        writers = {x // 1000 for x in got}
        assert len(writers) == 1, f"round {round_}: rows of writers {writers} mixed: {got}"
        (winner,) = writers
        assert got == [winner * 1000 + round_ * 10 + k for k in range(3)], f"round {round_}: {got}"
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    # the log, the data and the provider's history index beside the log: no lock of any kind
    assert all(
        k.startswith(("tables/t/_delta_log/", "tables/t/ds=", "tables/t/_dltrain_history/")) for k in keys
    ), [k for k in keys if not k.startswith(("tables/t/_delta_log/", "tables/t/ds="))]
    assert not [k for k in keys if "lock" in k.lower()]
    # the races were real: writers conflicted and committed on a later attempt
    assert "conflicted with a concurrent writer (attempt 1 of" in caplog.text
    assert "done at attempt" in caplog.text
