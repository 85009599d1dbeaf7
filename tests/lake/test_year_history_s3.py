"""On S3 an unchanged re-run of a date makes the same storage requests late in the history as early.

A fortnight of the simulated history (``benchmarks.history_year``: the provider's re-run decisions
and writers, a weekly compaction and VACUUM) on moto's server, whose request recorder counts every
request the re-run makes: delta-rs's, pyarrow's and boto3's alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.conftest import REPO, free_port, wait_for_port

NIGHTS = 9


def _call(endpoint: str, path: str, method: str = "POST") -> str:
    with urllib.request.urlopen(urllib.request.Request(endpoint + path, method=method)) as response:
        return response.read().decode()


@pytest.fixture(scope="module")
def recording_s3(tmp_path_factory):
    """A moto server of its own whose request recorder writes into the test's folder."""
    home = tmp_path_factory.mktemp("s3rec")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_dltrain.testing.moto_server",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=REPO,
        env=dict(os.environ, MOTO_RECORDER_FILEPATH=str(home / "recording")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}", home
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.poll() is not None


def _requests(endpoint: str, run) -> list[dict]:
    _call(endpoint, "/moto-api/recorder/reset-recording")
    _call(endpoint, "/moto-api/recorder/start-recording")
    try:
        run()
    finally:
        _call(endpoint, "/moto-api/recorder/stop-recording")
    return [
        json.loads(line)
        for line in _call(endpoint, "/moto-api/recorder/download-recording", "GET").splitlines()
        if line.strip()
    ]


def test_an_unchanged_rerun_makes_as_many_s3_requests_on_day_8_as_on_day_1(recording_s3):
    import boto3

    from airflow_provider_dltrain.lake.storage import s3_storage_options
    from benchmarks.history_year import generate, rerun

    endpoint, home = recording_s3
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="year")
    options = s3_storage_options(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_url=endpoint,
        allow_unsafe_rename=True,
    )
    year = generate("s3://year/lake", str(home / "landing"), NIGHTS, storage_options=options)
    early = _requests(endpoint, lambda: rerun(year, 1))
    late = _requests(endpoint, lambda: rerun(year, NIGHTS - 1))
    writes = [r for r in early + late if r["method"] in ("PUT", "POST", "DELETE")]
    assert not writes, f"an unchanged re-run wrote: {writes[:3]}"
    # the same decisions from the history index: no commit file walked, however many nights before
    assert len(late) == len(early), (len(early), len(late))

    def commit_reads(requests):  # a walk of the log back to the partition's write reads one per commit since
        return [r["url"] for r in requests if r["method"] == "GET" and "/_delta_log/0" in r["url"]]

    assert len(commit_reads(late)) == len(commit_reads(early)), (commit_reads(early), commit_reads(late))
