"""An unchanged ETL re-run is decided from recorded facts before Spark starts: what counts as changed.

Most tests need no Spark: the partition is written the way the stage writes it (the facts recorded in
its commit) with delta-rs, and the decision is taken again. One test runs the operator for real.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_dltrain.engines import RunSpec
from airflow_provider_dltrain.etl.rerun_check import check_etl
from airflow_provider_dltrain.lake import DeltaLog, overwrite_partition
from airflow_provider_dltrain.lake.rerun_facts import META_RERUN_CHANGED, META_RERUN_FACTS

DS = "2026-11-28"
TRANSFORM = "rerun_transforms:scaled"


@pytest.fixture
def landing(tmp_path):
    path = tmp_path / "landing" / DS
    path.mkdir(parents=True)
    (path / "a.csv").write_text("id,x\n1,1.5\n2,2.5\n")
    (path / "b.csv").write_text("id,x\n3,-1\n")
    return path


def _spec(tmp_path, landing, **params: Any) -> RunSpec:
    base = {
        "transform": TRANSFORM,
        "inputs": {"raw": {"path": str(landing), "format": "csv"}},
        "transform_params": {"factor": 2},
        "write": {},
        "spark_conf": {},
    }
    return RunSpec(
        stage="etl", table_uri=str(tmp_path / "t"), partition={"ds": DS}, params={**base, **params}
    )


def _write(spec: RunSpec, metadata: dict[str, str], rows: int = 3) -> int:
    """Replace the partition as the stage would, recording ``metadata``; returns the version."""
    data = pa.table({"id": list(range(rows)), "x": [float(i) for i in range(rows)]})
    return overwrite_partition(spec.table_uri, data, spec.partition, metadata=metadata).version


def _computed_then_written(spec: RunSpec) -> int:
    first = check_etl(spec)
    assert not first.skipped and first.facts is not None
    return _write(spec, first.metadata())


def test_unchanged_inputs_code_and_params_skip_returning_the_commit_that_wrote_the_partition(
    tmp_path, landing
):
    spec = _spec(tmp_path, landing)
    version = _computed_then_written(spec)
    again = check_etl(spec)
    assert again.skipped, again.reason
    result = again.result
    assert result["version"] == version and result["uri"] == spec.table_uri
    assert result["committed"] is False and result["skipped"] is True and result["rows_written"] == 3
    assert "unchanged since version 0" in again.reason and "raw: 2 file(s)" in again.reason


def test_the_facts_and_what_changed_are_recorded_in_the_commit(tmp_path, landing):
    spec = _spec(tmp_path, landing)
    version = _computed_then_written(spec)
    info = DeltaLog(spec.table_uri).commit_info(version)
    assert info[META_RERUN_CHANGED] == "first write"
    assert '"stage":"etl"' in info[META_RERUN_FACTS] and '"raw":{"files":2' in info[META_RERUN_FACTS]
    (landing / "c.csv").write_text("id,x\n4,4\n")
    check = check_etl(spec)
    assert check.metadata()[META_RERUN_CHANGED] == "inputs.raw"


def _changed_file(landing):
    (landing / "c.csv").write_text("id,x\n4,4\n")


def _longer_file(landing):
    with open(landing / "a.csv", "a") as fh:
        fh.write("5,5\n")


def _touched_file(landing):
    st = os.stat(landing / "a.csv")
    os.utime(landing / "a.csv", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _same_size_rewrite(landing):
    time.sleep(0.01)  # a later modification time, as any rewrite has
    (landing / "b.csv").write_text("id,x\n3,-2\n")


@pytest.mark.parametrize("change", [_changed_file, _longer_file, _touched_file, _same_size_rewrite])
def test_a_changed_listing_runs_the_stage(tmp_path, landing, change):
    spec = _spec(tmp_path, landing)
    _computed_then_written(spec)
    change(landing)
    check = check_etl(spec)
    assert not check.skipped and "changed since version 0: inputs.raw" in check.reason


@pytest.mark.parametrize(
    "params",
    [
        {"transform_params": {"factor": 3}},
        {"write": {"max_bad_fraction": 0.1}},
        {"inputs": {"raw": {"path": "LANDING", "format": "csv", "options": {"sep": ";"}}}},
    ],
)
def test_changed_parameters_run_the_stage(tmp_path, landing, params):
    _computed_then_written(_spec(tmp_path, landing))
    if "inputs" in params:
        params["inputs"]["raw"]["path"] = str(landing)
    check = check_etl(_spec(tmp_path, landing, **params))
    assert not check.skipped and check.reason.endswith("changed since version 0: params")


def test_changed_transform_code_runs_the_stage(tmp_path, landing, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(os.path.join(os.path.dirname(__file__), "rerun_transforms.py"), code / "rerun_copy.py")
    monkeypatch.syspath_prepend(str(code))
    spec = _spec(tmp_path, landing, transform="rerun_copy:scaled")
    _computed_then_written(spec)
    assert check_etl(spec).skipped
    with open(code / "rerun_copy.py", "a") as fh:
        fh.write("\n\ndef helper():\n    return 1\n")
    check = check_etl(spec)
    assert not check.skipped and check.reason.endswith("changed since version 0: code")


def _delta_input(tmp_path) -> str:
    uri = str(tmp_path / "source")
    overwrite_partition(uri, pa.table({"id": [1, 2], "x": [1.0, 2.0]}), {"ds": DS})
    return uri


def _delta_spec(tmp_path, landing, uri: str, version: int) -> RunSpec:
    inputs = {"raw": {"uri": uri, "version": version, "filters": [["ds", "=", DS]]}}
    return _spec(tmp_path, landing, inputs=inputs)


def test_a_delta_input_counts_by_content_not_by_version(tmp_path, landing):
    source = _delta_input(tmp_path)
    _computed_then_written(_delta_spec(tmp_path, landing, source, 0))
    # another partition appended: a new pinned version, the same rows for this filter
    overwrite_partition(source, pa.table({"id": [9], "x": [9.0]}), {"ds": "2026-11-29"})
    assert check_etl(_delta_spec(tmp_path, landing, source, 1)).skipped
    # the partition read is restated: new content
    overwrite_partition(source, pa.table({"id": [1, 2], "x": [1.0, 2.5]}), {"ds": DS})
    check = check_etl(_delta_spec(tmp_path, landing, source, 2))
    assert not check.skipped and "changed since version 0: inputs.raw" in check.reason


def test_force_runs_the_stage_and_records_the_facts(tmp_path, landing):
    spec = _spec(tmp_path, landing)
    _computed_then_written(spec)
    forced = check_etl(spec, force=True)
    assert not forced.skipped and forced.reason.endswith("force=True")
    assert forced.metadata()[META_RERUN_CHANGED] == "force" and forced.facts == check_etl(spec).facts


def test_a_partition_written_without_facts_runs_the_stage(tmp_path, landing):
    spec = _spec(tmp_path, landing)
    _write(spec, {})  # another tool, or a release before this check
    check = check_etl(spec)
    assert not check.skipped and "recorded no facts" in check.reason


def test_a_partition_another_tool_wrote_after_the_facts_runs_the_stage(tmp_path, landing):
    from deltalake import write_deltalake

    spec = _spec(tmp_path, landing)
    _computed_then_written(spec)
    extra = pa.table({"id": [7], "x": [7.0], "ds": [DS]})
    write_deltalake(spec.table_uri, extra, mode="append", partition_by=["ds"])
    check = check_etl(spec)
    assert not check.skipped and "version 1" in check.reason and "recorded no facts" in check.reason


def test_a_missing_input_runs_the_stage_and_records_nothing(tmp_path, landing):
    spec = _spec(tmp_path, landing)
    _computed_then_written(spec)
    shutil.rmtree(landing)
    check = check_etl(spec)
    assert not check.skipped and check.facts is None and check.metadata() == {}
    assert "input 'raw' has no listing" in check.reason


# -- the operator ---------------------------------------------------------------------------------
class _TI:
    dag_id, run_id, task_id, try_number, map_index = "nightly", "scheduled__1", "ingest", 1, -1

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def _context() -> dict[str, Any]:
    return {"ti": _TI(), "run_id": _TI.run_id, "logical_date": None, "outlet_events": {}}


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Records every Spark session asked for and every stage run."""
    from airflow_provider_dltrain.etl import spark as spark_module
    from airflow_provider_dltrain.jobs import stages

    calls: list[str] = []
    session, run_stage = spark_module.spark_session, stages.run_stage
    monkeypatch.setattr(
        spark_module, "spark_session", lambda *a, **k: calls.append("spark") or session(*a, **k)
    )
    monkeypatch.setattr(stages, "run_stage", lambda *a, **k: calls.append("stage") or run_stage(*a, **k))
    return calls


def test_the_operator_rerun_of_an_unchanged_partition_starts_no_spark_session(
    spark, tmp_path, landing, started
):
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    def operator(ds: str = DS, **kwargs: Any) -> SparkToDeltaOperator:
        return SparkToDeltaOperator(
            task_id="ingest",
            table_uri=str(tmp_path / "t"),
            partition={"ds": ds},
            transform=TRANSFORM,
            inputs={"raw": {"path": str(landing), "format": "csv"}},
            transform_params={"factor": 2},
            **kwargs,
        )

    first = operator().execute(_context())
    assert first["committed"] is True and started == ["stage", "spark"]
    assert operator(ds="2026-11-29").execute(_context())["version"] == 1  # a later date, written after it
    started.clear()
    again = operator().execute(_context())
    assert started == []  # no stage, no Spark session asked for
    assert again["committed"] is False and again["skipped"] is True
    assert (again["version"], again["rows_written"], again["digest"]) == (0, 3, first["digest"])
    forced = operator(force="{{ 'True' }}")
    forced.render_template_fields({"ti": _TI()})
    result = forced.execute(_context())
    assert started == ["stage", "spark"] and result["committed"] is False and "skipped" not in result
    assert DeltaLog(str(tmp_path / "t")).latest_version() == 1


def test_a_force_that_is_not_a_bool_is_refused_when_the_dag_is_parsed(tmp_path):
    from airflow_provider_dltrain.exceptions import InvalidSpecError
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    with pytest.raises(InvalidSpecError, match="force must be True or False, got 'sometimes'"):
        SparkToDeltaOperator(
            task_id="t", table_uri=str(tmp_path), partition={"ds": DS}, transform=TRANSFORM, force="sometimes"
        )
