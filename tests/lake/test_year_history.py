"""History at the scale of months: pins, re-run facts and reads survive Delta's log and file clean-up.

The reproduction of the table settings delta-rs gives by default: a checkpoint every 100 commits
and commit files older than 30 days removed after it. Tables the provider creates keep the backfill
horizon instead (``lake.retention``), and its history index answers pins from beside the log.
"""

from __future__ import annotations

import glob
import json
import os
import time
from datetime import date, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, write_deltalake

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake import history, history_index, retention
from airflow_provider_dltrain.lake.digest import META_PARTITION
from airflow_provider_dltrain.lake.reader import scan_version
from airflow_provider_dltrain.lake.rerun_facts import META_RERUN_FACTS, last_write

DAY0 = date(2026, 1, 1)
DELTA_DEFAULTS = {
    "delta.logRetentionDuration": "interval 30 days",
    "delta.deletedFileRetentionDuration": "interval 7 days",
    "delta.checkpointInterval": "100",
}


def _ds(i: int) -> str:
    return (DAY0 + timedelta(days=i)).isoformat()


def _age_log(uri: str, days: int) -> None:
    then = time.time() - days * 86400
    for path in glob.glob(os.path.join(uri, "_delta_log", "*.json")):
        os.utime(path, (then, then))


def _provider_write(uri: str, i: int) -> lake.DeltaRef:
    return lake.overwrite_partition(
        uri,
        pa.table({"x": [i, i + 1]}),
        {"ds": _ds(i)},
        metadata={META_RERUN_FACTS: json.dumps({"day": i})},
        configuration=DELTA_DEFAULTS,  # a table made before the horizon existed: Delta's defaults
    )


@pytest.fixture(scope="module")
def cut_table(tmp_path_factory):
    """150 daily partitions, the log aged 60 days, 60 more: delta-rs's clean-up removed commits 0-98."""
    uri = str(tmp_path_factory.mktemp("year") / "t")
    refs = [_provider_write(uri, i) for i in range(150)]
    _age_log(uri, 60)
    refs += [_provider_write(uri, i) for i in range(150, 210)]
    return uri, refs


def test_the_reproduction_really_lost_the_old_commit_files(cut_table):
    uri, refs = cut_table
    kept = sorted(os.listdir(os.path.join(uri, "_delta_log")))
    assert not os.path.exists(os.path.join(uri, "_delta_log", f"{refs[5].version:020d}.json"))
    assert kept[0].startswith(f"{99:020d}.")  # the checkpoint at 99 and the commits from there on


def test_a_partition_written_before_the_cleaned_log_is_still_pinned_to_its_own_commit(cut_table):
    uri, refs = cut_table
    assert history.partition_commit(uri, {"ds": _ds(5)}) == refs[5]
    assert history.cutoff_commit(uri, {"ds": _ds(5)}) == refs[5]
    assert history.cutoff_commit(uri, {"ds": _ds(180)}) == refs[180]


def test_its_recorded_facts_survive_so_a_rerun_is_skipped_not_recomputed(cut_table):
    uri, refs = cut_table
    last = last_write(uri, {"ds": _ds(5)})
    assert last is not None and last.ref.version == refs[5].version
    assert last.wrote({"ds": _ds(5)}) and last.recorded_facts() == {"day": 5}
    assert last.rows == 2 and not last.metadata_changed_since


def test_reading_a_pin_older_than_the_log_reads_the_same_rows_from_the_oldest_readable_version(
    cut_table, caplog
):
    _uri, refs = cut_table
    with caplog.at_level("WARNING"):
        scan = scan_version(refs[5], None, [("ds", "<=", _ds(5))])
    assert "reading its rows from version 99" in caplog.text
    read = sorted(x for f in scan.files for x in pq.read_table(f.uri).column("x").to_pylist())
    assert read == sorted(x for i in range(6) for x in (i, i + 1))


def test_a_pin_whose_rows_changed_after_the_cleaned_log_is_refused_naming_what_changed(cut_table):
    _uri, refs = cut_table
    with pytest.raises(TableNotFoundError, match=r"cannot be read any more.*changed since \(ds=2026-01-07"):
        scan_version(refs[5], None, [("ds", "<=", _ds(200))])  # partitions 100-200 changed since


def test_a_table_another_tool_wrote_with_defaults_pins_to_the_oldest_readable_version(tmp_path, caplog):
    uri = str(tmp_path / "t")
    for i in range(110):
        write_deltalake(
            uri,
            pa.table({"x": [i], "ds": [_ds(i)]}),
            partition_by=["ds"],
            mode="overwrite",
            predicate=f"ds = '{_ds(i)}'",
            commit_properties=CommitProperties(custom_metadata={"by": "another tool"}),
        )
        if i == 100:
            _age_log(uri, 60)
    assert not os.path.exists(os.path.join(uri, "_delta_log", f"{5:020d}.json"))
    with caplog.at_level("WARNING"):
        ref = history.partition_commit(uri, {"ds": _ds(5)})
    assert ref.version == 99 and "removed by the table's log retention" in caplog.text
    rows = lake.open_table(uri, ref.version).to_pyarrow_table(filters=[("ds", "=", _ds(5))])
    assert rows.column("x").to_pylist() == [5]
    last = last_write(uri, {"ds": _ds(5)})
    assert last is not None and last.recorded_facts() is None  # nothing recorded: computed, never guessed


def test_tables_the_provider_creates_keep_the_horizon_and_short_ones_are_warned_about(tmp_path, monkeypatch):
    ours = str(tmp_path / "ours")
    lake.overwrite_partition(ours, pa.table({"x": [1]}), {"ds": _ds(0)})
    config = lake.open_table(ours).metadata().configuration
    assert (
        config["delta.logRetentionDuration"]
        == config["delta.deletedFileRetentionDuration"]
        == "interval 400 days"
    )
    assert retention.check_table(ours) == []
    monkeypatch.setenv(retention.HORIZON_ENV, "500")
    warned = retention.check_table(ours)
    assert len(warned) == 2 and "shorter than the backfill horizon of 500 days" in warned[0]

    theirs = str(tmp_path / "theirs")
    write_deltalake(theirs, pa.table({"x": [1], "ds": [_ds(0)]}), partition_by=["ds"])
    monkeypatch.delenv(retention.HORIZON_ENV)
    warned = retention.check_table(theirs)
    oldest = (date.today() - timedelta(days=30)).isoformat()
    assert any("delta.logRetentionDuration is unset" in w and f"from {oldest} on" in w for w in warned)
    assert any("delta.deletedFileRetentionDuration" in w for w in warned)
    assert retention.retain(theirs) and retention.check_table(theirs) == []


def test_a_lagging_index_head_is_caught_up_from_the_log_and_never_wrong(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(3):
        lake.overwrite_partition(uri, pa.table({"x": [i]}), {"ds": _ds(i)})
    # another tool writes two commits: the head does not know them
    for i in (3, 1):
        write_deltalake(
            uri, pa.table({"x": [9], "ds": [_ds(i)]}), mode="overwrite", predicate=f"ds = '{_ds(i)}'"
        )
    index = history_index.load(uri)
    assert index.indexed == 4 and index.stats.caught_up == 2
    assert history.partition_commit(uri, {"ds": _ds(1)}).version == 4
    assert history.cutoff_commit(uri, {"ds": _ds(2)}).version == 4
    last = last_write(uri, {"ds": _ds(1)})
    assert last.ref.version == 4 and last.info.get(META_PARTITION) is None  # another tool's write


def test_the_training_fingerprint_from_the_index_equals_the_one_resolved_from_the_files(tmp_path):
    from airflow_provider_dltrain.lake.scan_plan import index_fingerprint, resolve

    uri = str(tmp_path / "t")
    refs = [lake.overwrite_partition(uri, pa.table({"x": [i, -i]}), {"ds": _ds(i)}) for i in range(6)]
    lake.overwrite_partition(uri, pa.table({"x": [7]}), {"ds": _ds(2)})  # a restatement
    for ref, bound in ((refs[3], 3), (lake.latest(uri), 4), (lake.latest(uri), 9)):
        wanted = [["ds", "<=", _ds(bound)]]
        fast = index_fingerprint(ref, wanted)
        assert fast is not None and fast == (resolve(ref, wanted).fingerprint, ("ds",))
    # equalities look partitions up by their value (each conjunction's), the rest scans them: same answer
    latest = lake.latest(uri)
    for wanted in (
        [["ds", "=", _ds(2)]],
        [["ds", "==", _ds(4)], ["ds", ">=", _ds(3)]],
        [[["ds", "=", _ds(1)]], [["ds", "=", _ds(5)], ["ds", "!=", _ds(5)]], [["ds", "=", "2000-01-01"]]],
        [[["ds", "=", _ds(0)]], [["ds", ">", _ds(3)]]],
        [["ds", "=", "no such day"]],
        [["ds", "<", _ds(2)]],
        [["ds", ">=", _ds(4)], ["ds", "<=", _ds(5)]],
        [[["ds", ">", _ds(1)], ["ds", "!=", _ds(3)]], [["ds", "<", _ds(1)]]],
        [["ds", "!=", _ds(2)]],
        [["ds", "<=", "2026"]],
    ):
        assert index_fingerprint(latest, wanted) == (resolve(latest, wanted).fingerprint, ("ds",)), wanted
        assert index_fingerprint(refs[3], wanted) == (resolve(refs[3], wanted).fingerprint, ("ds",)), wanted
    assert index_fingerprint(refs[5], [["x", ">", 1]]) is None  # a row filter: resolve decides


def test_a_weekly_compaction_keeps_the_facts_digests_and_fingerprint_of_the_rows_it_rearranged(tmp_path):
    from airflow_provider_dltrain.lake.rerun_facts import version_fingerprint
    from airflow_provider_dltrain.lake.scan_plan import index_fingerprint, resolve

    uri = str(tmp_path / "t")
    written = [_provider_write(uri, i) for i in range(3)]
    before = lake.latest(uri)
    wanted = [("ds", "<=", _ds(2))]
    print_before = version_fingerprint(before, wanted)["hash"]
    lake.open_table(uri).optimize.z_order(["x"])  # rewrites every partition's files, same rows
    after = lake.latest(uri)
    assert after.version == before.version + 1
    index = history_index.load(uri)
    assert all(index.last_write(history_index.key_of({"ds": _ds(i)})).rearranged for i in range(3))
    last = last_write(uri, {"ds": _ds(1)})
    assert last.recorded_facts() == {"day": 1} and last.ref == written[1]  # the write, not the compaction
    assert version_fingerprint(after, wanted)["hash"] == print_before
    assert (
        index_fingerprint(after, wanted)[0]
        == resolve(after, wanted).fingerprint
        == resolve(before, wanted).fingerprint
    )


def test_a_pin_whose_compacted_files_were_vacuumed_reads_the_compaction_and_a_restated_one_is_refused(
    tmp_path,
):
    from airflow_provider_dltrain.lake.maintenance import vacuum

    uri = str(tmp_path / "t")
    written = [_provider_write(uri, i) for i in range(3)]
    lake.open_table(uri).optimize.z_order(["x"])
    assert history.cutoff_commit(uri, {"ds": _ds(1)}) == written[1]  # a compaction never moves a pin
    lake.overwrite_partition(uri, pa.table({"x": [42]}), {"ds": _ds(0)})  # a restatement of day 0
    vacuum(uri, retention_hours=0, force=True)  # what a 0-hour retention does to the old versions
    scan = scan_version(written[1], None, [("ds", "=", _ds(1))])
    assert scan.ref == written[1] and scan.files
    assert sorted(x for f in scan.files for x in pq.read_table(f.uri).column("x").to_pylist()) == [1, 2]
    with pytest.raises(TableNotFoundError, match=r"deleted by a VACUUM.*changed since \(ds=2026-01-01\)"):
        scan_version(written[1], None, [("ds", "<=", _ds(1))])


def test_the_rerun_facts_from_the_index_equal_the_scans_for_equalities_and_ranges(tmp_path, monkeypatch):
    from airflow_provider_dltrain.lake import rerun_facts

    uri = str(tmp_path / "t")
    for i in range(5):
        _provider_write(uri, i)
    ref = lake.latest(uri)
    filters = (
        [("ds", "=", _ds(2))],
        [[("ds", "=", _ds(1))], [("ds", ">", _ds(3))]],
        [[("ds", "=", _ds(0))], [("ds", "=", _ds(4))]],
        [("ds", "<=", _ds(3))],
        [("ds", "=", "no such day")],
        [("ds", ">", _ds(1)), ("ds", "<", _ds(4))],
        [[("ds", ">=", _ds(3))], [("ds", "<", _ds(1))]],
    )
    fast = [rerun_facts.version_fingerprint(ref, f) for f in filters]
    monkeypatch.setattr(rerun_facts, "_from_index", lambda *_: None)  # what the files say
    assert fast == [rerun_facts.version_fingerprint(ref, f) for f in filters]
    assert [f["partitions"] for f in fast] == [1, 2, 2, 4, 0, 2, 3]
