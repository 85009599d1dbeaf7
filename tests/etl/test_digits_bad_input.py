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
