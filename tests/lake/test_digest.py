"""Row hashes and content digests: equal rows hash equal, whatever their encoding, order or files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.lake.digest import (
    META_DIGEST,
    META_PARTITION,
    DigestState,
    partition_digest,
    partition_digests,
    row_hashes,
)

DS = "2026-11-24"


def _digest(table: pa.Table) -> str:
    state = DigestState()
    state.update(table)
    return state.hexdigest(table.schema)


def test_list_rows_hash_by_elements_and_their_positions():
    lists = pa.array([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [1.0], [1.0, 2.0, 0.0]], pa.list_(pa.float32()))
    h = row_hashes(pa.table({"v": lists}))
    assert h.dtype == np.uint64
    assert h[0] == h[2]
    assert len({int(x) for x in h[[0, 1, 3, 4]]}) == 4


def test_a_null_list_an_empty_list_and_a_list_of_one_null_all_hash_differently():
    h = row_hashes(pa.table({"v": pa.array([None, [], [None], [0]], pa.list_(pa.int64()))}))
    assert len({int(x) for x in h}) == 4


def test_a_null_and_a_zero_hash_differently_in_every_kind_of_column():
    for values, typ in [([None, 0], pa.int64()), ([None, ""], pa.string()), ([None, 0.0], pa.float64())]:
        h = row_hashes(pa.table({"v": pa.array(values, typ)}))
        assert h[0] != h[1], typ


def test_large_string_large_list_and_dictionary_columns_hash_like_the_plain_types():
    plain = pa.table(
        {
            "s": pa.array(["a", None, "c"], pa.string()),
            "l": pa.array([[1], [], None], pa.list_(pa.int64())),
            "f": pa.array([[1.5, 2.5], [0.0, 1.0], None], pa.list_(pa.float32())),
        }
    )
    other = pa.table(
        {
            "s": pa.array(["a", None, "c"])
            .dictionary_encode()
            .cast(pa.dictionary(pa.int32(), pa.large_string())),
            "l": pa.array([[1], [], None], pa.large_list(pa.int64())),
            "f": pa.array([[1.5, 2.5], [0.0, 1.0], None], pa.list_(pa.float32(), 2)),
        }
    )
    assert list(row_hashes(plain)) == list(row_hashes(other))
    assert _digest(plain) == _digest(other)


def test_column_order_does_not_change_hashes_but_column_names_do():
    t = pa.table({"a": [1, 2], "b": ["x", "y"]})
    assert list(row_hashes(t)) == list(row_hashes(t.select(["b", "a"])))
    assert list(row_hashes(t)) != list(row_hashes(t.rename_columns(["a2", "b"])))
    swapped = pa.table({"a": [2, 1], "b": ["x", "y"]})  # same values, other rows
    assert list(row_hashes(t)) != list(row_hashes(swapped))


def test_negative_zero_and_every_nan_hash_like_zero_and_nan():
    payload_nan = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0]
    a = pa.table({"x": pa.array([0.0, float("nan")], pa.float64())})
    b = pa.table({"x": pa.array([-0.0, payload_nan], pa.float64())})
    assert list(row_hashes(a)) == list(row_hashes(b))
    assert row_hashes(pa.table({"x": [0.0]}))[0] != row_hashes(pa.table({"x": [1e-300]}))[0]


def test_timestamps_hash_by_instant_at_microsecond_precision():
    import datetime as dt

    when = dt.datetime(2026, 11, 28, 10, 0, tzinfo=dt.timezone.utc)
    us = pa.table({"t": pa.array([when], pa.timestamp("us", "UTC"))})
    ns = pa.table({"t": pa.array([when], pa.timestamp("ns", "UTC"))})
    assert list(row_hashes(us)) == list(row_hashes(ns))


def test_structs_maps_and_decimals_hash_through_their_values():
    from decimal import Decimal

    t = pa.table(
        {
            "s": pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, None]),
            "m": pa.array([[("k", 1)], [("k", 1)], None], pa.map_(pa.string(), pa.int64())),
            "d": pa.array([Decimal("1.10"), Decimal("1.10"), None], pa.decimal128(5, 2)),
        }
    )
    h = row_hashes(t)
    assert len({int(x) for x in h}) == 3


def test_digest_ignores_row_order_and_batching_but_counts_duplicates():
    t = pa.table({"x": list(range(10)), "s": [str(i) for i in range(10)]})
    shuffled = t.take(pa.array([3, 1, 4, 0, 5, 9, 2, 6, 8, 7]))
    parts = [DigestState(), DigestState()]
    parts[0].update(shuffled.slice(0, 4))
    parts[1].update(shuffled.slice(4))
    merged = DigestState.from_dict(json.loads(json.dumps(parts[1].to_dict()))).merge(parts[0])
    assert merged.hexdigest(t.schema) == _digest(t)
    assert _digest(pa.concat_tables([t, t.slice(0, 1)])) != _digest(t)  # a row twice is not once
    assert _digest(pa.concat_tables([t, t])) != _digest(t)


def test_digest_covers_the_schema():
    t = pa.table({"x": pa.array([1, 2], pa.int64())})
    assert _digest(t) != _digest(t.cast(pa.schema([("x", pa.int32())])))


def test_hashes_are_the_same_in_another_process():
    code = (
        "import pyarrow as pa\n"
        "from airflow_provider_dltrain.lake.digest import row_hashes\n"
        "t = pa.table({'s': ['a', None], 'l': pa.array([[1.0], []], pa.list_(pa.float32())), 'i': [1, 2]})\n"
        "print(','.join(str(int(h)) for h in row_hashes(t)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    t = pa.table({"s": ["a", None], "l": pa.array([[1.0], []], pa.list_(pa.float32())), "i": [1, 2]})
    assert out.stdout.strip() == ",".join(str(int(h)) for h in row_hashes(t))


def test_each_overwrite_records_the_partition_and_its_content_digest(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"x": [1, 2, 3]})
    ref = lake.overwrite_partition(uri, data, {"ds": DS})
    info = lake.DeltaLog(uri).commit_info(ref.version)
    assert json.loads(info[META_PARTITION]) == {"ds": DS}
    assert info[META_DIGEST] == _digest(data) == partition_digest(uri, ref.version, {"ds": DS})


def test_a_digest_not_recorded_is_computed_from_the_live_files_and_equals_the_recorded_one(tmp_path):
    from deltalake import write_deltalake

    legacy, ours = str(tmp_path / "legacy"), str(tmp_path / "ours")
    data = pa.table({"x": [3, 1, 2], "s": ["c", "a", None], "ds": [DS] * 3})
    write_deltalake(legacy, data, partition_by=["ds"])
    assert META_DIGEST not in lake.DeltaLog(legacy).commit_info(0)
    lake.overwrite_partition(ours, data.drop_columns(["ds"]), {"ds": DS})
    computed = partition_digest(legacy, 0, {"ds": DS})
    assert computed is not None and computed == partition_digest(ours, 0, {"ds": DS})


def test_partition_digests_answers_for_many_partitions_and_none_for_absent_ones(tmp_path):
    uri = str(tmp_path / "t")
    for i, ds in enumerate(["2026-11-01", "2026-11-02", "2026-11-03"]):
        lake.overwrite_partition(uri, pa.table({"x": [i]}), {"ds": ds})
    got = partition_digests(uri, 2, [{"ds": "2026-11-01"}, {"ds": "2026-11-03"}, {"ds": "2026-12-01"}])
    assert got["ds=2026-12-01"] is None
    assert got["ds=2026-11-01"] == _digest(pa.table({"x": [0]}))
    assert got["ds=2026-11-03"] == _digest(pa.table({"x": [2]}))
    assert partition_digest(uri, 1, {"ds": "2026-11-03"}) is None  # not written yet at version 1


def test_a_digest_whose_commit_was_cleaned_up_is_computed_from_the_files(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": "2026-11-01"})
    lake.overwrite_partition(uri, pa.table({"x": [3]}), {"ds": "2026-11-02"})
    lake.open_table(uri).create_checkpoint()
    os.remove(os.path.join(uri, "_delta_log", f"{0:020d}.json"))  # what log retention does
    assert partition_digest(uri, 1, {"ds": "2026-11-01"}) == _digest(pa.table({"x": [1, 2]}))


@pytest.mark.parametrize("columns", [["x", "y"], ["y", "x"]])
def test_a_column_added_later_reads_as_null_in_the_digest_of_older_files(tmp_path, columns):
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"x": [1], "ds": [DS]}), partition_by=["ds"])
    write_deltalake(
        uri,
        pa.table({"x": [2], "y": [1.0], "ds": ["2026-11-25"]}),
        partition_by=["ds"],
        mode="append",
        schema_mode="merge",
    )
    expected = pa.table({"x": [1], "y": pa.array([None], pa.float64())}).select(columns)
    assert partition_digest(uri, 1, {"ds": DS}) == _digest(expected)
