"""A kill between the main and the quarantine commit never pairs one run's quarantine with another's rows."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.etl import write_dataframe
from airflow_provider_dltrain.etl import writer as etl_writer
from airflow_provider_dltrain.lake.pairing import META_MAIN_DIGEST, META_MAIN_VERSION, quarantine_pairing

DS = "2026-11-24"


def _frame(spark, offset=0, bad=(3, 7)):
    from pyspark.sql import functions as F

    df = spark.range(20, numPartitions=2).select(
        (F.col("id") + offset).alias("id"),
        F.concat(F.lit("file-"), F.col("id").cast("string")).alias("source_file"),
    )
    error = F.when((F.col("id") - offset).isin(*bad), F.lit("unreadable")).otherwise(
        F.lit(None).cast("string")
    )
    return df.withColumn("_error", error)


def _killed_after_the_main_commit(monkeypatch):
    original = etl_writer.commit_files
    calls = []

    def commit_then_die(uri, *args, **kwargs):
        if calls:
            raise KeyboardInterrupt("killed between the two commits")
        calls.append(uri)
        return original(uri, *args, **kwargs)

    monkeypatch.setattr(etl_writer, "commit_files", commit_then_die)
    return calls


def _pairing(uri):
    return quarantine_pairing(uri, f"{uri}_quarantine", {"ds": DS})


@pytest.mark.parametrize("same_bad_rows", [True, False])
def test_a_kill_between_the_commits_is_reported_stale_and_the_rerun_pairs_them(
    spark, tmp_path, monkeypatch, same_bad_rows
):
    uri = str(tmp_path / "t")
    first = write_dataframe(_frame(spark), uri, {"ds": DS}, max_bad_fraction=0.5)
    assert _pairing(uri).state == "paired" and _pairing(uri).quarantine == first.quarantine_ref

    second = _frame(spark, offset=100, bad=(3, 7) if same_bad_rows else (4,))
    calls = _killed_after_the_main_commit(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        write_dataframe(second, uri, {"ds": DS}, max_bad_fraction=0.5)
    assert calls == [uri]  # the main table was committed first, the quarantine never
    stale = _pairing(uri)
    assert stale.state == "stale" and stale.quarantine is None
    assert stale.main.version == lake.latest(uri).version == 1
    monkeypatch.undo()

    rerun = write_dataframe(second, uri, {"ds": DS}, max_bad_fraction=0.5)
    assert not rerun.committed and rerun.ref.version == 1  # main unchanged since the killed run
    assert rerun.quarantine_committed  # even when its rows equal the stale ones: the pairing changed
    paired = _pairing(uri)
    assert paired.state == "paired" and paired.quarantine == rerun.quarantine_ref
    info = lake.DeltaLog(f"{uri}_quarantine").commit_info(rerun.quarantine_ref.version)
    assert info[META_MAIN_VERSION] == "1" and info[META_MAIN_DIGEST] == rerun.digest

    again = write_dataframe(second, uri, {"ds": DS}, max_bad_fraction=0.5)
    assert not again.committed and not again.quarantine_committed  # unchanged pair: nothing at all
    assert again.quarantine_ref == rerun.quarantine_ref
    assert lake.latest(f"{uri}_quarantine").version == rerun.quarantine_ref.version


def test_a_kill_before_the_first_quarantine_exists_is_reported_stale(spark, tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    _killed_after_the_main_commit(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        write_dataframe(_frame(spark), uri, {"ds": DS}, max_bad_fraction=0.5)
    assert _pairing(uri).state == "stale"  # the main commit says rows were quarantined


def test_a_run_without_bad_rows_and_no_quarantine_table_is_paired_with_nothing(spark, tmp_path):
    uri = str(tmp_path / "t")
    result = write_dataframe(_frame(spark, bad=()), uri, {"ds": DS})
    assert result.quarantine_ref is None
    assert _pairing(uri).state == "none"
