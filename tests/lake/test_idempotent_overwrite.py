"""Content-idempotent partition writes: the same rows again commit nothing and keep the version."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dltrain import lake

DS = "2026-11-24"


def _data_files(uri, ds=DS):
    folder = os.path.join(uri, f"ds={ds}")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _rows(n=6):
    return pa.table({"x": list(range(n)), "s": [f"r{i}" for i in range(n)]})


def test_rewriting_the_same_rows_in_another_order_commits_nothing_and_keeps_the_version(tmp_path):
    uri = str(tmp_path / "t")
    first = lake.overwrite_partition(uri, _rows(), {"ds": DS})
    lake.overwrite_partition(uri, pa.table({"x": [9], "s": ["other"]}), {"ds": "2026-11-25"})
    files = _data_files(uri)
    for _ in range(3):
        again = lake.overwrite_partition(uri, _rows().take(pa.array([5, 3, 1, 0, 2, 4])), {"ds": DS})
        assert again == first
    assert lake.latest(uri).version == 1
    assert _data_files(uri) == files


def test_reordered_columns_and_large_types_are_the_same_content(tmp_path):
    uri = str(tmp_path / "t")
    first = lake.overwrite_partition(uri, _rows(), {"ds": DS})
    same = _rows().select(["s", "x"]).cast(pa.schema([("s", pa.large_string()), ("x", pa.int64())]))
    assert lake.overwrite_partition(uri, same, {"ds": DS}) == first
    assert lake.latest(uri).version == 0


def test_changing_one_value_or_one_row_commits_a_new_version(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, _rows(), {"ds": DS})
    changed = _rows().set_column(1, "s", pa.array(["r0", "r1", "r2", "r3", "r4", "CHANGED"]))
    assert lake.overwrite_partition(uri, changed, {"ds": DS}).version == 1
    assert lake.overwrite_partition(uri, changed.slice(0, 5), {"ds": DS}).version == 2
    assert lake.overwrite_partition(uri, _rows(), {"ds": DS}).version == 3  # back to the first content


def test_a_duplicated_row_is_a_change(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, _rows(), {"ds": DS})
    doubled = pa.concat_tables([_rows(), _rows().slice(2, 1)])
    assert lake.overwrite_partition(uri, doubled, {"ds": DS}).version == 1
    assert lake.open_table(uri).to_pyarrow_table().num_rows == 7


def test_a_schema_change_commits_even_with_the_same_rows(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, _rows(), {"ds": DS})
    wider = _rows().append_column("w", pa.array([None] * 6, pa.float64()))
    ref = lake.overwrite_partition(uri, wider, {"ds": DS}, schema_mode="merge")
    assert ref.version > 0
    assert "w" in lake.open_table(uri).schema().to_arrow().names


def test_a_partition_written_without_a_digest_gets_one_computed_and_a_same_rewrite_commits_nothing(tmp_path):
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, _rows().append_column("ds", pa.array([DS] * 6)), partition_by=["ds"])
    files = _data_files(uri)
    assert lake.overwrite_partition(uri, _rows().take(pa.array([1, 0, 2, 3, 5, 4])), {"ds": DS}).version == 0
    assert lake.latest(uri).version == 0 and _data_files(uri) == files
    assert lake.overwrite_partition(uri, _rows(5), {"ds": DS}).version == 1


def test_an_empty_write_into_an_absent_or_empty_partition_is_unchanged(tmp_path):
    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, _rows(), {"ds": "2026-11-23"})
    empty = _rows().slice(0, 0)
    assert lake.overwrite_partition(uri, empty, {"ds": DS}).version == 0
    lake.overwrite_partition(uri, _rows(), {"ds": DS})
    emptied = lake.overwrite_partition(uri, empty, {"ds": DS})
    assert emptied.version == 2 and not lake.has_partition(uri, 2, {"ds": DS})
    lake.overwrite_partition(uri, empty, {"ds": DS})
    assert lake.latest(uri).version == 2


def _spark_like_files(uri, table, pieces, tag):
    """Write ``table`` into the partition directory as ``pieces`` files, as the Spark executors do."""
    folder = os.path.join(uri, f"ds={DS}")
    os.makedirs(folder, exist_ok=True)
    files, step = [], -(-table.num_rows // pieces)
    for i in range(pieces):
        rel = f"ds={DS}/part-{tag}-{i}.parquet"
        part = table.slice(i * step, step)
        pq.write_table(part, os.path.join(uri, rel))
        size = os.path.getsize(os.path.join(uri, rel))
        stats = json.dumps({"numRecords": part.num_rows})
        files.append(lake.WrittenFile(rel, size, part.num_rows, stats, int(time.time() * 1000)))
    return files


def test_committing_the_same_rows_in_other_files_commits_nothing_and_removes_the_new_files(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("ds", pa.string())])
    first = lake.commit_files(
        uri, _spark_like_files(uri, _rows(), 1, "a"), schema, {"ds": DS}, partition_by=["ds"]
    )
    assert first.committed and first.ref.version == 0 and first.digest
    files = _data_files(uri)
    shuffled = _rows().take(pa.array([4, 5, 0, 1, 2, 3]))
    again = lake.commit_files(
        uri, _spark_like_files(uri, shuffled, 3, "b"), schema, {"ds": DS}, partition_by=["ds"]
    )
    assert (again.committed, again.ref, again.digest) == (False, first.ref, first.digest)
    assert _data_files(uri) == files and lake.latest(uri).version == 0


def test_commit_files_with_a_digest_state_from_the_writer_trusts_it(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("ds", pa.string())])
    state = lake.DigestState()
    state.update(_rows())
    first = lake.commit_files(
        uri, _spark_like_files(uri, _rows(), 2, "a"), schema, {"ds": DS}, partition_by=["ds"], digest=state
    )
    assert first.digest == lake.partition_digest(uri, 0, {"ds": DS}) == state.hexdigest(schema.remove(2))
    again = lake.commit_files(
        uri, _spark_like_files(uri, _rows(), 2, "b"), schema, {"ds": DS}, partition_by=["ds"], digest=state
    )
    assert not again.committed and len(_data_files(uri)) == 2


def test_a_schema_conflict_at_commit_removes_the_written_files(tmp_path):
    import pytest

    from airflow_provider_dltrain.exceptions import SchemaMismatchError

    uri = str(tmp_path / "t")
    lake.overwrite_partition(uri, pa.table({"x": ["a"], "s": ["b"]}), {"ds": "2026-11-23"})
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("ds", pa.string())])
    files = _spark_like_files(uri, _rows(), 1, "a")
    with pytest.raises(SchemaMismatchError):
        lake.commit_files(uri, files, schema, {"ds": DS}, partition_by=["ds"])
    assert _data_files(uri) == []


def test_restoring_rows_another_engine_deleted_through_a_deletion_vector_commits_them(tmp_path):
    from deltalake import write_deltalake

    from airflow_provider_dltrain.lake.reader import scan_version
    from tests.lake.deletion_vectors import delete_with_deletion_vector

    uri = str(tmp_path / "t")
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    write_deltalake(
        uri,
        rows.append_column("ds", pa.array(["2026-11-24"] * 5)),
        partition_by=["ds"],
        configuration={"delta.enableDeletionVectors": "true"},
    )
    deleted_at = delete_with_deletion_vector(uri, {"ds": "2026-11-24"}, [3])

    restored = lake.overwrite_partition(uri, rows, {"ds": "2026-11-24"})

    assert restored.version == deleted_at + 1  # the deleted row is back: a real commit, not "unchanged"
    scan = scan_version(lake.latest(uri))
    ids = [i for f in scan.files for i in pq.read_table(f.uri).column("id").to_pylist()]
    assert sorted(ids) == [0, 1, 2, 3, 4] and not any(f.deleted_rows for f in scan.files)
    again = lake.overwrite_partition(uri, rows, {"ds": "2026-11-24"})
    assert again.version == restored.version
