from __future__ import annotations

import multiprocessing as mp

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidPartitionError, InvalidSpecError, SchemaMismatchError


def _rows(uri):
    return sorted(lake.open_table(uri).to_pyarrow_table().to_pylist(), key=lambda r: (r["ds"], r["x"]))


def test_rerunning_a_date_three_times_leaves_the_content_of_one_run(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": "2026-11-27"})
    lake.overwrite_partition(uri, pa.table({"x": [1, 2, 3]}), {"ds": "2026-11-28"})
    once = _rows(uri)
    for _ in range(3):
        lake.overwrite_partition(uri, pa.table({"x": [1, 2, 3]}), {"ds": "2026-11-28"})
    assert _rows(uri) == once


@pytest.mark.parametrize(
    "value",
    ["2026-11-28' OR '1'='1", '2026-11-28" OR 1=1 --', "x'; DROP TABLE t; --", "a/b", "a=b", "", "  ", None],
)
def test_a_partition_value_that_could_widen_the_predicate_is_refused(tmp_path, value):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-27"})
    with pytest.raises(InvalidPartitionError, match="partition"):
        lake.overwrite_partition(uri, pa.table({"x": [9]}), {"ds": value})
    assert _rows(uri) == [{"x": 1, "ds": "2026-11-27"}]


def test_an_empty_partition_spec_is_refused_never_a_whole_table_overwrite(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-27"})
    with pytest.raises(InvalidPartitionError, match="whole table"):
        lake.overwrite_partition(uri, pa.table({"x": [9]}), {})
    assert lake.latest(uri).version == 0


def test_rows_of_another_partition_in_the_data_are_refused(tmp_path):
    with pytest.raises(InvalidSpecError, match="2026-11-28"):
        lake.overwrite_partition(
            str(tmp_path / "t"), pa.table({"x": [1], "ds": ["2026-11-27"]}), {"ds": "2026-11-28"}
        )


def test_schema_conflict_names_the_columns_and_writes_nothing(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1], "y": ["a"]}), {"ds": "2026-11-27"})
    with pytest.raises(SchemaMismatchError, match=r"x: table has int64, data has string.*\['y'\]"):
        lake.overwrite_partition(uri, pa.table({"x": ["1"]}), {"ds": "2026-11-28"})
    with pytest.raises(SchemaMismatchError, match=r"\['z'\].*schema_mode='merge'"):
        lake.overwrite_partition(uri, pa.table({"x": [1], "y": ["b"], "z": [1.0]}), {"ds": "2026-11-28"})
    assert lake.latest(uri).version == 0
    lake.overwrite_partition(
        uri, pa.table({"x": [1], "y": ["b"], "z": [1.0]}), {"ds": "2026-11-28"}, schema_mode="merge"
    )
    assert "z" in lake.open_table(uri).schema().to_arrow().names


def test_each_commit_records_the_airflow_task_that_made_it(tmp_path):
    uri = str(tmp_path / "t")
    meta = lake.commit_metadata(
        dag_id="d", run_id="r1", task_id="t", try_number=2, logical_date="2026-11-28T00:00:00+00:00"
    )
    ref = lake.overwrite_partition(uri, pa.table({"x": [1]}), {"ds": "2026-11-28"}, metadata=meta)
    info = lake.DeltaLog(uri).commit_info(ref.version)
    assert {k: info[k] for k in meta} == {
        "airflow.dag_id": "d",
        "airflow.run_id": "r1",
        "airflow.task_id": "t",
        "airflow.try_number": "2",
        "airflow.logical_date": "2026-11-28T00:00:00+00:00",
    }


def _racer(uri, ds, barrier, n):
    barrier.wait()
    try:
        lake.overwrite_partition(uri, pa.table({"x": list(range(n))}), {"ds": ds})
    except Exception as err:  # a conflict may fail one writer
        print("writer failed:", err)


def test_concurrent_runs_of_one_date_leave_one_copy_of_each_row(tmp_path):
    ctx = mp.get_context("spawn")
    for round_ in range(3):
        uri = str(tmp_path / f"t{round_}")
        lake.overwrite_partition(uri, pa.table({"x": [0]}), {"ds": "2026-11-27"})
        barrier = ctx.Barrier(3)
        procs = [ctx.Process(target=_racer, args=(uri, "2026-11-28", barrier, 50)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        rows = [r for r in _rows(uri) if r["ds"] == "2026-11-28"]
        assert sorted(r["x"] for r in rows) == list(range(50))


def _files_racer(uri, ds, barrier, n, tag):
    import json
    import os
    import time

    import pyarrow.parquet as pq

    rel = f"ds={ds}/part-{tag}.parquet"
    os.makedirs(os.path.join(uri, f"ds={ds}"), exist_ok=True)
    pq.write_table(pa.table({"x": list(range(n))}), os.path.join(uri, rel))
    written = lake.WrittenFile(
        rel,
        os.path.getsize(os.path.join(uri, rel)),
        n,
        json.dumps({"numRecords": n}),
        int(time.time() * 1000),
    )
    barrier.wait()
    try:
        lake.commit_files(
            uri,
            [written],
            pa.schema([("x", pa.int64()), ("ds", pa.string())]),
            {"ds": ds},
            partition_by=["ds"],
        )
    except Exception as err:
        print("writer failed:", err)


def test_concurrent_commits_of_spark_written_files_into_an_empty_partition_never_duplicate(tmp_path):
    # Files committed by another engine carry no read predicate, so delta-rs alone would let every
    # racer append; the per-partition txn id makes them conflict, and the retries replace the winner's rows.
    ctx = mp.get_context("spawn")
    for round_ in range(3):
        uri = str(tmp_path / f"t{round_}")
        lake.overwrite_partition(uri, pa.table({"x": [0]}), {"ds": "2026-11-27"})
        barrier = ctx.Barrier(3)
        procs = [
            ctx.Process(target=_files_racer, args=(uri, "2026-11-28", barrier, 40, f"w{i}")) for i in range(3)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        rows = [r for r in _rows(uri) if r["ds"] == "2026-11-28"]
        assert sorted(r["x"] for r in rows) == list(range(40))
