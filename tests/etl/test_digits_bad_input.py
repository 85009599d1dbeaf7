"""Bad input in the demo transform ends in quarantine with a stable reason; the day is still committed."""

from __future__ import annotations

import csv
import os

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.demo.digits_etl import decode_digits
from airflow_provider_dltrain.demo.seed import seed_day
from airflow_provider_dltrain.etl import read_inputs, write_dataframe

DS = "2026-11-24"
PER_DAY = 12


def _inputs(landing, ds=DS):
    return {
        "images": {
            "path": f"{landing}/{ds}/images",
            "format": "binaryFile",
            "options": {"pathGlobFilter": "*.png"},
        },
        "labels": {"path": f"{landing}/{ds}/labels.csv", "format": "csv"},
    }


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    """A seeded day, then: labels 'abc', -5 and 10, two conflicting labels for one file, an empty PNG."""
    root = str(tmp_path_factory.mktemp("landing"))
    day = seed_day(root, DS, per_day=PER_DAY)
    labels = os.path.join(day.path, "labels.csv")
    with open(labels, newline="") as fh:
        rows = [r for r in csv.reader(fh)][1:]
    edits = {"img_0002.png": "abc", "img_0003.png": "-5", "img_0004.png": "10"}
    rows = [[name, edits.get(name, label)] for name, label in rows]
    rows.append(["img_0001.png", "7" if rows[1][1] != "7" else "3"])  # a second, conflicting label
    rows.append(["empty.png", "4"])
    with open(labels, "w", newline="") as fh:
        csv.writer(fh).writerows([["file", "label"], *rows])
    open(os.path.join(day.path, "images", "empty.png"), "wb").close()
    return root


def _landed(landing):
    return len([f for f in os.listdir(f"{landing}/{DS}/images") if f.endswith(".png")])


def test_each_bad_input_is_quarantined_with_a_stable_reason_and_the_day_is_committed(
    spark, landing, tmp_path
):
    uri = str(tmp_path / "digits")
    df = decode_digits(spark, read_inputs(spark, _inputs(landing)), {})
    result = write_dataframe(df, uri, {"ds": DS}, max_bad_fraction=0.6)
    assert result.committed
    assert result.rows_written + result.rows_quarantined == _landed(landing) == PER_DAY + 4
    bad = lake.open_table(f"{uri}_quarantine").to_pyarrow_table().to_pylist()
    reasons = {r["source_file"].rsplit("/", 1)[-1]: r["reason"] for r in bad}
    assert reasons["img_0002.png"] == "label 'abc' is not an integer"
    assert reasons["img_0003.png"] == "label -5 outside 0..9"
    assert reasons["img_0004.png"] == "label 10 outside 0..9"
    assert reasons["img_0001.png"] == "2 labels for img_0001.png in labels.csv"
    assert reasons["empty.png"] == "empty file"
    assert reasons["no_label.png"] == "missing label in labels.csv"
    assert reasons["bad_truncated.png"].startswith("cannot decode PNG")
    assert len(bad) == len(reasons) == 8  # one row per file: the duplicated label did not duplicate it
    good = lake.open_table(uri).to_pyarrow_table().to_pylist()
    assert len({r["source_file"] for r in good}) == len(good) == PER_DAY - 4
    assert all(0 <= r["label"] <= 9 for r in good)


def test_a_rerun_of_the_day_with_the_same_bad_input_commits_nothing(spark, landing, tmp_path):
    uri = str(tmp_path / "digits")
    for _ in range(2):
        df = decode_digits(spark, read_inputs(spark, _inputs(landing)), {})
        result = write_dataframe(df, uri, {"ds": DS}, max_bad_fraction=0.6)
    assert not result.committed and not result.quarantine_committed
    assert lake.latest(uri).version == 0 and lake.latest(f"{uri}_quarantine").version == 0


def test_a_missing_day_folder_gives_the_providers_own_error_naming_the_input_and_path(spark, tmp_path):
    from airflow_provider_dltrain.exceptions import DltrainTransientError, InputNotFoundError

    with pytest.raises(InputNotFoundError, match=r"input 'images': nothing at .*2026-12-31/images") as err:
        read_inputs(spark, _inputs(str(tmp_path), "2026-12-31"))
    assert isinstance(err.value, DltrainTransientError)  # retried: the day may land late
    assert "PATH_NOT_FOUND" not in str(err.value)


def _day_with_labels(tmp_path, header):
    """A seeded day whose labels.csv has the given header (the demo expects ``file,label``)."""
    root = str(tmp_path / "landing")
    day = seed_day(root, DS, per_day=3)
    labels = os.path.join(day.path, "labels.csv")
    with open(labels, newline="") as fh:
        rows = [r for r in csv.reader(fh)][1:]
    with open(labels, "w", newline="") as fh:
        csv.writer(fh).writerows([header, *rows])
    return root, labels


def test_labels_without_a_label_column_fail_as_a_user_error_naming_the_file_and_its_columns(spark, tmp_path):
    from airflow_provider_dltrain.exceptions import DltrainUserError, SchemaMismatchError

    root, labels = _day_with_labels(tmp_path, ["file", "lbl"])
    inputs = read_inputs(spark, _inputs(root))
    with pytest.raises(SchemaMismatchError) as err:
        decode_digits(spark, inputs, {})
    message = str(err.value)
    assert isinstance(err.value, DltrainUserError)  # never retried
    assert f"input 'labels' ({labels})" in message
    assert "no column 'label'" in message
    assert "its columns are ['file', 'lbl']" in message and "expects ['file', 'label']" in message


def test_a_transform_using_a_missing_column_fails_as_a_user_error_listing_the_inputs_columns(spark, tmp_path):
    from airflow_provider_dltrain.etl import run_transform
    from airflow_provider_dltrain.exceptions import SchemaMismatchError

    root, labels = _day_with_labels(tmp_path, ["file", "lbl"])
    inputs = read_inputs(spark, {"labels": _inputs(root)["labels"]})

    def uses_label(spark, inputs, params):
        return inputs["labels"].select("label")

    with pytest.raises(SchemaMismatchError, match=r"refers to a column its input does not have") as err:
        run_transform(spark, uses_label, inputs, {})
    assert f"'labels' ({labels}) has ['file', 'lbl']" in str(err.value)


def test_a_user_error_in_a_cloud_job_is_reported_back_and_fails_the_task_without_retry(spark, tmp_path):
    """The job entry point (what Glue/EMR run) writes ``user_error``; the operator side then fails fast."""
    import json

    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_dltrain.engines import JobHandle, JobStatus, RunSpec, outcome
    from airflow_provider_dltrain.engines.base import FAILED
    from airflow_provider_dltrain.jobs.entry import main
    from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

    root, _ = _day_with_labels(tmp_path, ["file", "lbl"])
    result_uri = str(tmp_path / "result.json")
    spec = RunSpec(
        stage="etl",
        table_uri=str(tmp_path / "digits"),
        partition={"ds": DS},
        params={
            "transform": "airflow_provider_dltrain.demo.digits_etl:decode_digits",
            "inputs": _inputs(root),
        },
        result_uri=result_uri,
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    assert main(["--spec", str(tmp_path / "spec.json")]) == 1
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["user_error"] is True and "SchemaMismatchError" in written["error"]

    class Job:  # the adapter's part: hand back what the job wrote
        name = "glue"

        def result(self, handle):
            return written

    handle = JobHandle("glue", {"job_run_id": "jr_1"}, result_uri)
    failed = pytest.raises(AirflowFailException, match=r"no column 'label'.*\['file', 'lbl'\]")
    with failed, fail_fast_on_user_error():
        outcome(Job(), handle, JobStatus(FAILED, "FAILED", "exit 1"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "images",
    [
        {"path": "{day}/images", "format": "binaryFile", "options": {"pathGlobFilter": "*.jpg"}},
        {"path": "{day}/images/*.jpg", "format": "binaryFile"},
    ],
    ids=["pathGlobFilter", "glob-in-path"],
)
def test_an_images_glob_matching_nothing_is_a_user_error_naming_the_glob(spark, landing, images):
    from airflow_provider_dltrain.exceptions import DltrainUserError, NoFilesMatchedError

    spec = {**images, "path": images["path"].format(day=f"{landing}/{DS}")}
    with pytest.raises(NoFilesMatchedError) as err:
        read_inputs(spark, {**_inputs(landing), "images": spec})
    message = str(err.value)
    assert isinstance(err.value, DltrainUserError)  # never retried, unlike a day that has not landed
    assert message.startswith("input 'images': no file matched '") and "*.jpg" in message
    assert f"at {landing}/{DS}/images (16 other file(s) there, e.g. bad_size.png" in message


def test_an_s3_glob_matching_nothing_is_a_user_error_naming_the_glob(s3_bucket):
    import boto3

    from airflow_provider_dltrain.etl.remote_files import read_remote
    from airflow_provider_dltrain.exceptions import NoFilesMatchedError

    bucket, options = s3_bucket
    s3 = boto3.client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.put_object(Bucket=bucket, Key=f"landing/{DS}/images/img_0000.png", Body=b"png")
    uri = f"s3://{bucket}/landing/{DS}/images"
    with pytest.raises(NoFilesMatchedError, match=rf"no file matched '\*\.jpg' at {uri} \(1 other file"):
        read_remote(None, uri, "binaryFile", {"pathGlobFilter": "*.jpg"}, options)
