"""A lake copied with a plain Delta tool (no ``_dltrain_history``), then its logs cleaned up.

The nightly's recorded facts of the older dates are then gone with the commit files: a re-run of
such a date gives the nightly's answer with nothing committed, or is refused before anything is
written, naming why — it never commits a recomputation whose provenance differs (the scores of
the same rows with ``input_version`` 3 instead of 1).

The tables are written as the stages write them (the input partitions by
``overwrite_partition``, the scores with the facts the scoring decision records); no Spark, no
model.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_dltrain.etl.rerun_check import check_score
from airflow_provider_dltrain.exceptions import HistoryGoneError
from airflow_provider_dltrain.lake import DeltaLog, cutoff_commit, overwrite_partition
from airflow_provider_dltrain.lake.history_index import INDEX_DIR
from airflow_provider_dltrain.lake.rerun_facts import last_write

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
MODEL = {"name": "digits", "version": 1, "model_uri": "models:/digits/1"}


def _params(pin: Any, ds: str) -> dict[str, Any]:
    return {
        "model": dict(MODEL),
        "input": pin.to_dict(),
        "input_filter": [["ds", "=", ds]],
        "scoring": {"feature_columns": ["features"], "key_columns": ["id"]},
        "allow_pickle": False,
    }


def _nightly(lake: str, ds: str) -> None:
    """The nightly of ``ds``: ingest its partition, pin the cut-off, score it recording the facts."""
    i = DAYS.index(ds)
    overwrite_partition(f"{lake}/digits", pa.table({"id": [i], "features": [[float(i)]]}), {"ds": ds})
    pin = cutoff_commit(f"{lake}/digits", {"ds": ds})
    check = check_score(f"{lake}/scores", {"ds": ds}, _params(pin, ds))
    assert not check.skipped
    scores = pa.table({"id": [i], "prediction": [i % 2], "input_version": [pin.version]})
    overwrite_partition(f"{lake}/scores", scores, {"ds": ds}, metadata=check.metadata())


def _clean_log(uri: str) -> None:
    """A checkpoint, then the commit files before it aged past the tables' retention and cleaned up."""
    table = DeltaTable(uri)
    table.create_checkpoint()
    then = time.time() - 500 * 86400  # past the 400-day horizon the provider's tables keep
    for path in glob.glob(os.path.join(uri, "_delta_log", "*.json")):
        os.utime(path, (then, then))
    table.cleanup_metadata()


@dataclass
class Lake:
    uri: str  # the lake, put back in place from a copy without ``_dltrain_history``, its logs cleaned up
    before: Any  # the re-run of the second date on the nightly lake, before the copy
    kept: Any  # the last write of that date's scores before the copy


def _rerun(lake: str, ds: str):
    pin = cutoff_commit(f"{lake}/digits", {"ds": ds})
    return pin, check_score(f"{lake}/scores", {"ds": ds}, _params(pin, ds))


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Four nightly dates; then the lake copied without its history folders and put back in place (its
    facts name the tables by URI), and the logs cleaned up (versions 0-2 of each table gone)."""
    uri = str(tmp_path_factory.mktemp("lake") / "lake")
    for ds in DAYS:
        _nightly(uri, ds)
    before = _rerun(uri, DAYS[1])
    kept = last_write(f"{uri}/scores", {"ds": DAYS[1]})
    copy = str(tmp_path_factory.mktemp("copy") / "lake")
    shutil.copytree(uri, copy, ignore=shutil.ignore_patterns(INDEX_DIR))
    shutil.rmtree(uri)
    shutil.move(copy, uri)
    for table in ("digits", "scores"):
        _clean_log(f"{uri}/{table}")
        assert not os.path.exists(f"{uri}/{table}/_delta_log/{1:020d}.json")
    return Lake(uri, before, kept)


def test_before_the_copy_a_rerun_of_the_second_date_is_the_nightly_answer_with_nothing_committed(lake):
    pin, check = lake.before
    assert pin.version == 1 and check.skipped, check.reason


def test_after_the_copy_a_rerun_of_the_second_date_is_refused_before_anything_is_written(lake):
    newest = DeltaLog(f"{lake.uri}/scores").latest_version()
    with pytest.raises(HistoryGoneError) as err:
        _rerun(lake.uri, DAYS[1])  # its input pin is now the oldest readable version, 3, for the same rows
    message = str(err.value)
    assert "ds=2026-11-02" in message and "scores" in message and INDEX_DIR in message
    assert "force=True" in message
    assert DeltaLog(f"{lake.uri}/scores").latest_version() == newest


def test_the_last_write_of_a_partition_older_than_the_log_says_its_facts_are_lost(lake):
    lost = last_write(f"{lake.uri}/scores", {"ds": DAYS[1]})
    assert lost is not None and lost.facts_lost and lost.recorded_facts() is None
    assert lake.kept is not None and not lake.kept.facts_lost and lake.kept.recorded_facts() is not None


def test_a_date_whose_commit_the_cleaned_log_still_holds_is_still_skipped(lake):
    """The oldest commit file kept is read as the commit it is, not as a stand-in for lost ones."""
    pin, check = _rerun(lake.uri, DAYS[3])
    assert pin.version == 3 and check.skipped, check.reason
    assert not last_write(f"{lake.uri}/scores", {"ds": DAYS[3]}).facts_lost


def test_force_recomputes_a_date_whose_facts_are_lost(lake):
    pin = cutoff_commit(f"{lake.uri}/digits", {"ds": DAYS[1]})
    check = check_score(f"{lake.uri}/scores", {"ds": DAYS[1]}, _params(pin, DAYS[1]), force=True)
    assert not check.skipped and check.changed == "force"


def test_lineage_of_a_version_whose_commit_is_gone_says_the_history_folder_is_missing(lake):
    from airflow_provider_dltrain.exceptions import TableNotFoundError
    from airflow_provider_dltrain.lineage import lineage

    with pytest.raises(
        TableNotFoundError, match=rf"no version 1 .*{INDEX_DIR}/ beside the log holds no copy"
    ):
        lineage(f"{lake.uri}/scores", 1)


def test_a_quarantine_partition_whose_pairing_commit_is_lost_is_refused_not_rewritten(tmp_path):
    """The main table's write kept, its quarantine table's commit of the date gone with its log: which
    write the bad rows belong to cannot be told, so the re-run stops before committing a new pairing."""
    from airflow_provider_dltrain.lake.digest import META_DIGEST
    from airflow_provider_dltrain.lake.pairing import (
        META_MAIN_DIGEST,
        META_MAIN_VERSION,
        META_ROWS_QUARANTINED,
        last_recorded_commit,
        quarantine_pairing,
    )

    lake = str(tmp_path)
    main, quarantine = f"{lake}/scores", f"{lake}/scores_quarantine"
    for i, ds in enumerate(DAYS[:2]):
        overwrite_partition(f"{lake}/digits", pa.table({"id": [i], "features": [[float(i)]]}), {"ds": ds})
        pin = cutoff_commit(f"{lake}/digits", {"ds": ds})
        check = check_score(main, {"ds": ds}, _params(pin, ds))
        rows = pa.table({"id": [i], "prediction": [i % 2], "input_version": [pin.version]})
        metadata = {**check.metadata(), META_ROWS_QUARANTINED: "1"}
        overwrite_partition(main, rows, {"ds": ds}, metadata=metadata)
        version, info = last_recorded_commit(main, {"ds": ds})
        pairing = {META_MAIN_VERSION: str(version), META_MAIN_DIGEST: info[META_DIGEST]}
        overwrite_partition(
            quarantine, pa.table({"id": [i], "_error": ["bad"]}), {"ds": ds}, metadata=pairing
        )
    assert quarantine_pairing(main, quarantine, {"ds": DAYS[0]}).state == "paired"
    assert _rerun(lake, DAYS[0])[1].skipped
    shutil.rmtree(f"{quarantine}/{INDEX_DIR}")  # the quarantine table copied without its history
    _clean_log(quarantine)
    assert quarantine_pairing(main, quarantine, {"ds": DAYS[0]}).state == "lost"
    newest = DeltaLog(quarantine).latest_version()
    with pytest.raises(
        HistoryGoneError, match=r"ds=2026-11-01 of .*scores: its quarantine partition in .*scores_quarantine"
    ):
        _rerun(lake, DAYS[0])
    assert DeltaLog(quarantine).latest_version() == newest
