"""On S3 an unchanged re-run of a date makes the same storage requests late in the history as early.

Nine nights of the simulated history (``benchmarks.history_year``: the provider's re-run decisions
and writers, a weekly compaction and VACUUM) on moto's server, whose request recorder counts every
request the re-run makes: delta-rs's, pyarrow's and boto3's alike.
"""

from __future__ import annotations

from airflow_provider_dltrain.testing.s3_recorder import recording_s3

NIGHTS = 9


def test_an_unchanged_rerun_makes_no_more_s3_requests_on_day_8_than_on_day_1(tmp_path):
    from benchmarks.history_year import generate, rerun

    with recording_s3(tmp_path) as s3:
        s3.create_bucket("year")
        year = generate(
            "s3://year/lake", str(tmp_path / "landing"), NIGHTS, storage_options=s3.storage_options
        )
        early = s3.requests(lambda: rerun(year, 1))
        late = s3.requests(lambda: rerun(year, NIGHTS - 1))
    writes = [r for r in early + late if r["method"] in ("PUT", "POST", "DELETE")]
    assert not writes, f"an unchanged re-run wrote: {writes[:3]}"
    # the same decisions from the history index: no commit file walked, however many nights before (a
    # late date can read one segment fewer: the summaries answer its cut-off when it is the newest)
    assert len(early) - 2 <= len(late) <= len(early), (len(early), len(late))

    def commit_reads(requests):  # a walk of the log back to the partition's write reads one per commit since
        return [r["url"] for r in requests if r["method"] == "GET" and "/_delta_log/0" in r["url"]]

    assert len(commit_reads(late)) == len(commit_reads(early)), (commit_reads(early), commit_reads(late))
