"""Scoring an unchanged partition again loads no model and starts no Spark: what counts as changed.

The decision tests need neither Spark nor MLflow: the model is named by its version, the output
partition is written the way scoring writes it (the facts recorded in its commit) with delta-rs.
One test runs the operator twice for real.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_dltrain.etl.rerun_check import check_score
from airflow_provider_dltrain.lake import DeltaLog, overwrite_partition
from airflow_provider_dltrain.lake.ref import DeltaRef

DS = "2026-11-28"
MODEL = {"name": "digits", "version": 2, "model_uri": "models:/digits/2"}
SCORING = {"feature_columns": ["features"], "key_columns": ["id"], "batch_size": 1000}


@pytest.fixture
def source(tmp_path) -> DeltaRef:
    uri = str(tmp_path / "input")
    overwrite_partition(uri, pa.table({"id": [1, 2], "features": [[0.5], [1.5]]}), {"ds": DS})
    return overwrite_partition(uri, pa.table({"id": [3], "features": [[2.5]]}), {"ds": "2026-11-27"})


def _params(ref: DeltaRef, **changes: Any) -> dict[str, Any]:
    params = {
        "model": dict(MODEL),
        "input": ref.to_dict(),
        "input_filter": [["ds", "=", DS]],
        "scoring": dict(SCORING),
        "allow_pickle": False,
    }
    return {**params, **changes}


def _scored(tmp_path, params: dict[str, Any]) -> int:
    """Write the output partition as scoring would, with the facts it records; returns the version."""
    check = check_score(str(tmp_path / "scores"), {"ds": DS}, params)
    assert not check.skipped and check.facts is not None
    rows = pa.table({"id": [1, 2], "prediction": [0, 1], "model_version": [2, 2]})
    return overwrite_partition(str(tmp_path / "scores"), rows, {"ds": DS}, metadata=check.metadata()).version


def _check(tmp_path, params: dict[str, Any], **kwargs: Any):
    return check_score(str(tmp_path / "scores"), {"ds": DS}, params, **kwargs)


def test_the_same_model_input_and_parameters_skip_with_the_version_that_holds_the_scores(tmp_path, source):
    version = _scored(tmp_path, _params(source))
    check = _check(tmp_path, _params(source))
    assert check.skipped, check.reason
    assert check.result == {
        **DeltaLog(str(tmp_path / "scores")).ref(version).to_dict(),
        "committed": False,
        "skipped": True,
        "reason": check.reason,
        "model_name": "digits",
        "model_version": 2,
    }
    assert "model digits v2" in check.reason
    assert f"input {source.uri} v{source.version} (1 partition(s))" in check.reason


@pytest.mark.parametrize(
    ("changes", "changed"),
    [
        ({"model": {**MODEL, "version": 3, "model_uri": "models:/digits/3"}}, "model"),
        ({"scoring": {**SCORING, "key_columns": ["id", "ds"]}}, "params"),
        ({"input_filter": [["ds", "=", DS], ["id", ">", 0]]}, "params"),
        ({"allow_pickle": True}, "params"),
    ],
)
def test_another_model_version_or_scoring_parameter_scores_again(tmp_path, source, changes, changed):
    _scored(tmp_path, _params(source))
    check = _check(tmp_path, _params(source, **changes))
    assert not check.skipped and check.reason.endswith(f"changed since version 0: {changed}")


def test_a_restated_input_partition_scores_again(tmp_path, source):
    _scored(tmp_path, _params(source))
    restated = overwrite_partition(
        source.uri, pa.table({"id": [1, 2], "features": [[0.5], [9.0]]}), {"ds": DS}
    )
    check = _check(tmp_path, _params(restated))
    assert not check.skipped and check.reason.endswith("changed since version 0: input")


def test_a_new_input_version_scores_again_since_every_row_records_it(tmp_path, source):
    _scored(tmp_path, _params(source))
    later = overwrite_partition(source.uri, pa.table({"id": [4], "features": [[1.0]]}), {"ds": "2026-11-29"})
    check = _check(tmp_path, _params(later))  # the same rows of DS, at a new version
    assert not check.skipped and check.reason.endswith("changed since version 0: input")
    assert check.facts["input"]["hash"] == _check(tmp_path, _params(source)).facts["input"]["hash"]


def test_force_scores_again(tmp_path, source):
    _scored(tmp_path, _params(source))
    check = _check(tmp_path, _params(source), force=True)
    assert not check.skipped and check.reason.endswith("force=True")


def test_scores_written_without_facts_are_scored_again(tmp_path, source):
    rows = pa.table({"id": [1, 2], "prediction": [0, 1]})
    overwrite_partition(str(tmp_path / "scores"), rows, {"ds": DS}, metadata={"dltrain.model_version": "2"})
    check = _check(tmp_path, _params(source))
    assert not check.skipped and "recorded no facts" in check.reason


# -- the operator ---------------------------------------------------------------------------------
@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Records every Spark session asked for, every stage run and every model load or inspection."""
    from airflow_provider_dltrain.etl import spark as spark_module
    from airflow_provider_dltrain.jobs import stages
    from airflow_provider_dltrain.registry import loading

    calls: list[str] = []

    def spy(module: Any, name: str) -> None:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, **k: calls.append(name) or real(*a, **k))

    spy(spark_module, "spark_session")
    spy(stages, "run_stage")
    spy(loading, "check_loadable")
    spy(loading, "load_torch_model")
    spy(loading, "fetch_pt2")
    return calls


def test_the_operator_rerun_loads_no_model_and_starts_no_spark(
    spark, promoted, input_table, tmp_path, started
):
    from test_inference_operator import _context, _operator, _run

    from airflow_provider_dltrain.store.config import TrackingConfig

    out = str(tmp_path / "scores")
    tracking: TrackingConfig = promoted.tracking

    def score() -> dict[str, Any]:
        op = _operator(
            model={"name": "digits", "alias": "champion"},
            model_as_of="{{ ds }}",
            input=input_table.to_dict(),
            table_uri=out,
            mlflow_conn_id=None,
        )
        with tracking.activated():
            return _run(op, _context(DS))

    first = score()
    assert "run_stage" in started and "fetch_pt2" in started  # the model checked and fetched once
    started.clear()
    again = score()
    assert started == []  # no model inspected or loaded, no stage, no Spark session
    assert again["version"] == first["version"] and again["committed"] is False and again["skipped"] is True
    assert DeltaLog(out).latest_version() == first["version"]
