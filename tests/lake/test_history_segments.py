"""The history index in segments: a pin reads the head and the segments its date falls in, not the history.

Segments of 3 partitions (``SEGMENT_PARTITIONS`` patched down) so that a dozen commits make four.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import pyarrow as pa
import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.lake import history_index, history_segments
from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit
from airflow_provider_dltrain.lake.history_segments import Segment, SegmentedWrites

DAYS = [f"2026-03-{d:02d}" for d in range(1, 13)]  # versions 0..11, segments [0-2] [3-5] [6-8] [9-11]


def _write(uri, ds, value):
    return lake.overwrite_partition(
        uri, pa.table({"x": [value]}), {"ds": ds}, metadata=lake.commit_metadata()
    )


@pytest.fixture
def table(tmp_path, monkeypatch):
    monkeypatch.setattr(history_segments, "SEGMENT_PARTITIONS", 3)
    uri = str(tmp_path / "t")
    for i, ds in enumerate(DAYS):
        _write(uri, ds, i)
    return uri


def _head(uri):
    with open(os.path.join(uri, history_index.HEAD)) as f:
        return json.load(f)


def _segment_files(uri):
    return sorted(os.listdir(os.path.join(uri, history_index.SEGMENTS_DIR)))


def test_the_head_keeps_a_summary_per_segment_and_no_partition_writes(table):
    head = _head(table)
    assert head["format"] == 3 and "partitions" not in head
    ranges = [s["ranges"]["ds"] for s in head["segments"]]
    assert ranges == [[DAYS[i], DAYS[i + 2]] for i in (0, 3, 6, 9)]
    assert [s["data_top"][0] for s in head["segments"]] == [2, 5, 8, 11]


def test_a_pin_reads_the_head_and_the_one_segment_its_date_falls_in(table):
    index = history_index.load(table)
    assert index is not None and isinstance(index.writes, SegmentedWrites)
    assert index.last_write(history_index.key_of({"ds": DAYS[7]})).version == 7
    assert index.writes.loaded == {2} and index.stats.reads == 2  # the head, segment 2
    cut = index.newest_touching(lambda v: v["ds"] <= DAYS[4], None, {"ds": DAYS[4]})
    assert cut.version == 4 and index.writes.loaded == {1, 2}  # segment 0 answered by its summary
    assert cutoff_commit(table, {"ds": DAYS[10]}).version == 10
    assert (
        cutoff_commit(table, {"ds": "2026-03-06T12"}).version == 5
    )  # wholly after segment 1: summaries only


def test_cutoffs_from_summaries_agree_with_reading_every_partition(table):
    _write(table, DAYS[1], 100)  # a restatement: version 12 moves every cut-off from day 2 on
    _write(table, DAYS[11], 111)  # version 13, into the last segment
    everything = history_index.load(table, use_head=False)
    for day in ["2026-02-28", *DAYS, "2026-04-01"]:
        segmented = history_index.load(table)
        expected = everything.newest_touching(lambda v, d=day: v["ds"] <= d, None)
        found = segmented.newest_touching(lambda v, d=day: v["ds"] <= d, None, {"ds": day})
        assert (found and found.version) == (expected and expected.version), day
    assert cutoff_commit(table, {"ds": DAYS[5]}, at_version=11).version == 5  # before the restatement


def test_a_write_rewrites_only_its_own_segment_and_removes_the_file_two_generations_back(table):
    before = {s["id"]: s["file"] for s in _head(table)["segments"]}
    _write(table, DAYS[4], 40)  # version 12 restates a partition of segment 1
    after = {s["id"]: s for s in _head(table)["segments"]}
    assert {i for i in after if after[i]["file"] != before[i]} == {1}
    assert after[1]["previous"] == before[1]  # kept for a reader of the previous head
    files = _segment_files(table)
    assert len([f for f in files if f.startswith("000001-")]) == 2
    _write(table, DAYS[5], 50)
    assert len([f for f in _segment_files(table) if f.startswith("000001-")]) == 2
    assert partition_commit(table, {"ds": DAYS[4]}).version == 12


def test_a_format_2_head_is_read_and_written_back_as_segments(table):
    index = history_index.load(table)
    old = {key: list(ws) for key, ws in index.writes.items()}
    legacy = {
        **index.to_json(),
        "format": 2,
        "partitions": [[dict(k), [w.to_json() for w in ws]] for k, ws in old.items()],
    }
    del legacy["segments"]
    with open(os.path.join(table, history_index.HEAD), "w") as f:
        json.dump(legacy, f)
    read = history_index.load(table)
    assert not isinstance(read.writes, SegmentedWrites) and read.writes == old
    assert cutoff_commit(table, {"ds": DAYS[4]}).version == 4
    _write(table, "2026-03-13", 13)
    assert _head(table)["format"] == 3 and len(_head(table)["segments"]) == 5


def test_a_head_older_than_its_segments_rebuilds_the_writes_from_the_log(table, caplog):
    head = _head(table)
    for name in _segment_files(table):
        if name.startswith("000002-"):
            os.remove(os.path.join(table, history_index.SEGMENTS_DIR, name))
    with open(os.path.join(table, history_index.HEAD), "w") as f:
        json.dump(head, f)
    with caplog.at_level(logging.WARNING):
        assert partition_commit(table, {"ds": DAYS[7]}).version == 7
    assert "rebuilding the partition writes" in caplog.text
    _write(table, DAYS[7], 70)  # the writer puts complete segments back
    assert partition_commit(table, {"ds": DAYS[7]}).version == 12


def test_ranges_compare_values_in_the_column_type():
    segment = Segment(0)
    keys = [(("h", str(h)),) for h in (8, 9, 10, 11)]
    history_segments.summarise(segment, [(k, []) for k in keys], {"h": "integer"})
    assert segment.ranges == {"h": ["8", "11"]}  # as text, "10" < "8"
    assert segment.relation({"h": 11}, {"h": "integer"}) == "all"
    assert segment.relation({"h": 9}, {"h": "integer"}) == "some"
    assert segment.relation({"h": 7}, {"h": "integer"}) == "none"
    assert segment.holds((("h", "12"),), {"h": "integer"}) is False
    assert segment.holds((("h", "9"),), {"h": "integer"}) is True
    assert segment.relation({"h": 7}, {"h": "string"}) == "some"  # types changed: nothing assumed


def test_a_new_partition_written_when_the_last_segment_is_gone_keeps_every_partition(table):
    head = _head(table)
    for name in _segment_files(table):
        if name.startswith("000003-"):
            os.remove(os.path.join(table, history_index.SEGMENTS_DIR, name))
    with open(os.path.join(table, history_index.HEAD), "w") as f:
        json.dump(head, f)
    _write(table, "2026-03-13", 13)  # a new key: it joins the last segment, which must be rebuilt first
    assert sum(s["count"] for s in _head(table)["segments"]) == 13
    assert partition_commit(table, {"ds": DAYS[10]}).version == 10


def test_an_old_head_without_its_segments_over_a_cleaned_log_answers_as_a_lost_index(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(history_segments, "SEGMENT_PARTITIONS", 3)
    uri = str(tmp_path / "t")
    for i, ds in enumerate(DAYS[:2]):
        _write(uri, ds, i)
    old_head = json.dumps(_head(uri))
    for i, ds in enumerate(DAYS[2:], start=2):
        _write(uri, ds, i)  # the writer checkpoints at version 10
    shutil.rmtree(
        os.path.join(uri, history_index.INDEX_DIR)
    )  # a copy without the folder, segments and records
    os.makedirs(os.path.join(uri, history_index.INDEX_DIR))
    with open(os.path.join(uri, history_index.HEAD), "w") as f:
        f.write(old_head)  # then a late writer's head, its segments gone with the folder
    for version in range(10):
        os.remove(os.path.join(uri, "_delta_log", f"{version:020d}.json"))  # log clean-up
    with caplog.at_level(logging.WARNING):
        pinned = cutoff_commit(uri, {"ds": DAYS[4]})
    assert pinned.version == 10  # the oldest readable version holds every partition as it was
    assert (
        "rebuilding the partition writes" in caplog.text
        and "oldest version its log still holds" in caplog.text
    )
