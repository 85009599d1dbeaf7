"""Batch scoring on real Delta tables with real MLflow models, Spark local[2]."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import DAYS, ROWS_PER_DAY, expected, features

from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.inference import LOAD_LOG_ENV, ScoringSpec, resolve_scoring_model, score_table
from airflow_provider_dltrain.lake import DeltaLog, open_table

SCORING = ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=1_000)
DAY = {"ds": DAYS[1]}
DAY_FILTER = [["ds", "=", DAYS[1]]]


def _score(spark, store, input_ref, out: str, model="models:/digits/1", partition=DAY, **kwargs):
    chosen = resolve_scoring_model(model, store.tracking)
    kwargs.setdefault("input_filter", DAY_FILTER)
    kwargs.setdefault("scoring", SCORING)
    return score_table(spark, chosen, input_ref, out, partition, tracking=store.tracking, **kwargs)


def _rows(uri: str, version: int | None = None):
    return open_table(uri, version).to_pyarrow_table().sort_by("id")


def test_scoring_by_uri_keeps_keys_and_adds_predictions_model_and_input_version(
    spark, store, input_table, tmp_path
):
    out = str(tmp_path / "scores")
    ref = _score(spark, store, input_table, out)

    table = _rows(out)
    assert table.column_names == [
        "id",
        "prediction",
        "score",
        "model_name",
        "model_version",
        "input_version",
        "ds",
    ]
    assert table.num_rows == ROWS_PER_DAY
    assert table.column("id").to_pylist() == list(range(ROWS_PER_DAY, 2 * ROWS_PER_DAY))
    assert set(table.column("model_name").to_pylist()) == {"digits"}
    assert set(table.column("model_version").to_pylist()) == {1}
    assert set(table.column("input_version").to_pylist()) == {input_table.version}
    assert set(table.column("ds").to_pylist()) == {DAYS[1]}
    labels, scores = expected(store.modules["1"], features(ROWS_PER_DAY, 1))
    np.testing.assert_array_equal(table.column("prediction").to_numpy(), labels)
    np.testing.assert_allclose(table.column("score").to_numpy(), scores, rtol=1e-5)
    info = DeltaLog(out).commit_info(ref.version)
    assert info["dltrain.model_name"] == "digits" and info["dltrain.model_version"] == "1"
    assert info["dltrain.input_version"] == str(input_table.version)


def test_rerun_of_same_partition_commits_nothing_and_leaves_one_copy_of_each_row(
    spark, store, input_table, tmp_path
):
    out = str(tmp_path / "scores")
    first = _score(spark, store, input_table, out)
    files = sorted(os.listdir(tmp_path / "scores" / f"ds={DAY['ds']}"))
    second = _score(spark, store, input_table, out)

    assert second.version == first.version  # same predictions: no new version, no new files
    assert sorted(os.listdir(tmp_path / "scores" / f"ds={DAY['ds']}")) == files
    rows = _rows(out)
    assert rows.num_rows == ROWS_PER_DAY
    assert len(set(rows.column("id").to_pylist())) == ROWS_PER_DAY
    assert rows.equals(_rows(out, first.version))


def test_scoring_one_partition_leaves_other_partitions_untouched(spark, store, input_table, tmp_path):
    out = str(tmp_path / "scores")
    _score(spark, store, input_table, out, partition={"ds": DAYS[0]}, input_filter=[["ds", "=", DAYS[0]]])
    other_files = sorted(open_table(out).file_uris([("ds", "=", DAYS[0])]))

    _score(spark, store, input_table, out, model={"name": "digits", "version": 2})

    table = open_table(out)
    assert sorted(table.file_uris([("ds", "=", DAYS[0])])) == other_files
    rows = table.to_pyarrow_table()
    days, versions = rows.column("ds").to_pylist(), rows.column("model_version").to_pylist()
    by_day = Counter(zip(days, versions, strict=True))
    assert by_day == {(DAYS[0], 1): ROWS_PER_DAY, (DAYS[1], 2): ROWS_PER_DAY}


def test_scoring_by_explicit_version_uses_that_version(spark, store, input_table, tmp_path):
    out = str(tmp_path / "scores")
    _score(spark, store, input_table, out, model={"name": "digits", "version": "2"})

    table = _rows(out)
    assert set(table.column("model_version").to_pylist()) == {2}
    labels, _ = expected(store.modules["2"], features(ROWS_PER_DAY, 1))
    np.testing.assert_array_equal(table.column("prediction").to_numpy(), labels)


def test_model_is_loaded_once_per_python_worker_not_per_batch(
    spark, store, multi_file_input, tmp_path, monkeypatch
):
    logs = tmp_path / "loads"
    logs.mkdir()
    monkeypatch.setenv(LOAD_LOG_ENV, str(logs))
    scoring = ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=250)
    out = str(tmp_path / "scores")

    # v3 is used by no other test, so every worker that scores must load it itself.
    _score(spark, store, multi_file_input, out, model="models:/digits/3", scoring=scoring, input_filter=None)
    _score(spark, store, multi_file_input, out, model="models:/digits/3", scoring=scoring, input_filter=None)

    loads, batches = Counter(), Counter()
    for path in Path(logs).glob("*.log"):
        for line in path.read_text().splitlines():
            (loads if line.startswith("load ") else batches)[path.stem] += 1
    assert batches, "no worker reported a batch"
    assert set(loads) == set(batches), "a worker scored without loading, or loaded without scoring"
    assert all(n == 1 for n in loads.values()), f"a worker loaded the model more than once: {loads}"
    assert sum(batches.values()) == 2 * 4_000 // 250
    assert _rows(out).num_rows == 4_000


def test_missing_feature_column_fails_before_any_job_naming_the_column(spark, store, input_table, tmp_path):
    scoring = ScoringSpec(feature_columns=("pixels",), key_columns=("id",))
    with pytest.raises(SchemaMismatchError, match="pixels"):
        _score(spark, store, input_table, str(tmp_path / "scores"), scoring=scoring)
    assert not (tmp_path / "scores").exists()


def test_filter_matching_no_files_is_refused_naming_the_filter(spark, store, input_table, tmp_path):
    with pytest.raises(InvalidSpecError, match="2026-01-01"):
        _score(spark, store, input_table, str(tmp_path / "scores"), input_filter=[["ds", "=", "2026-01-01"]])


def test_features_the_model_cannot_take_fail_as_schema_mismatch_and_commit_nothing(
    spark, store, input_table, tmp_path
):
    import pyarrow as pa

    from airflow_provider_dltrain.lake import overwrite_partition

    narrow = overwrite_partition(
        str(tmp_path / "narrow"),
        pa.table({"id": pa.array([1, 2], pa.int64()), "a": [0.1, 0.2], "b": [1.0, 2.0]}),
        {"ds": DAYS[1]},
    )
    scoring = ScoringSpec(feature_columns=("a", "b"), key_columns=("id",))
    with pytest.raises(SchemaMismatchError, match=r"rejected input of shape \(2, 2\)"):
        _score(spark, store, narrow, str(tmp_path / "scores"), scoring=scoring)
    assert DeltaLog(str(tmp_path / "scores")).latest_version() is None


def test_scoring_by_alias_uses_the_version_the_alias_holds(spark, promoted, input_table, tmp_path):
    out = str(tmp_path / "scores")
    _score(spark, promoted, input_table, out, model={"name": "digits", "alias": "champion"})

    table = _rows(out)
    assert set(table.column("model_version").to_pylist()) == {2}
    labels, _ = expected(promoted.modules["2"], features(ROWS_PER_DAY, 1))
    np.testing.assert_array_equal(table.column("prediction").to_numpy(), labels)


def test_scoring_with_champion_as_of_a_date_uses_the_champion_of_that_date(
    spark, promoted, input_table, tmp_path
):
    out = str(tmp_path / "scores")
    _score(spark, promoted, input_table, out, model={"name": "digits", "champion_as_of": "2026-11-22"})

    assert set(_rows(out).column("model_version").to_pylist()) == {1}


@pytest.mark.parametrize(
    ("as_of", "version"), [("2026-11-20", 1), ("2026-11-24", 1), ("2026-11-25", 2), ("2026-12-31", 2)]
)
def test_alias_resolved_as_of_a_date_is_the_champion_then_not_now(promoted, as_of, version):
    chosen = resolve_scoring_model({"name": "digits", "alias": "champion"}, promoted.tracking, as_of=as_of)
    assert (chosen.name, chosen.version, chosen.model_uri) == ("digits", version, f"models:/digits/{version}")


def test_unknown_model_version_is_refused_naming_the_field(store):
    from airflow_provider_dltrain.registry import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match=r"^model: .*digits"):
        resolve_scoring_model({"name": "digits", "version": 99}, store.tracking)
