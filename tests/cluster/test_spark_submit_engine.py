"""``engine="spark_submit"`` against the standalone cluster: the operators submit ``job_script.py`` with
``spark-submit --master spark://127.0.0.1:…``, the driver runs here, the executors on the cluster's
workers, and the operator returns the job's result.

Each spark-submit costs ~15-20 s on two cores, so every test submits as few jobs as it can. None of
these tests needs an in-process Spark session: the job's driver is spark-submit's Python process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from deltalake import DeltaTable

from airflow_provider_dltrain.engines import JobFailedError, RunIdentity
from airflow_provider_dltrain.lake import DeltaLog, open_table
from tests.support.spark_cluster import SparkCluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HERE = Path(__file__).resolve().parent
# etl_jobs and submit_jobs: top-level transform modules, staged into the job's code bundle
for _path in (str(HERE.parent / "engines"), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

DAG, RUN, DS = "submit_dag", "manual__2026-11-28", "2026-11-28"
# executors of 768m fit the fixture's 1g workers; a failing task fails the job at once, not after 4 tries
SUBMIT_ARGS = ["--conf", "spark.executor.memory=768m", "--conf", "spark.task.maxFailures=1"]
JOB_TIMEOUT_S = 240.0


def _context(task_id: str, try_number: int = 1) -> dict[str, Any]:
    ti = mock.MagicMock(dag_id=DAG, run_id=RUN, task_id=task_id, try_number=try_number, map_index=-1)
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id=DAG),
        "run_id": RUN,
        "logical_date": None,
        "outlet_events": {},
    }


def _identity(task_id: str, try_number: int = 1) -> RunIdentity:
    return RunIdentity(dag_id=DAG, run_id=RUN, task_id=task_id, try_number=try_number)


def _engine_options(cluster: SparkCluster, tmp_path: Path) -> dict[str, Any]:
    job_tmp = tmp_path / "job-tmp"
    job_tmp.mkdir(exist_ok=True)
    return {
        "master": cluster.master_url,
        "staging_uri": str(tmp_path / "staging"),
        "spark_submit_args": SUBMIT_ARGS,
        # The driver (here) binds and advertises loopback, where the cluster's daemons listen; the
        # job's Python temporary files go where the test can see what it leaves behind.
        "env": {"SPARK_LOCAL_IP": "127.0.0.1", "TMPDIR": str(job_tmp)},
    }


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    path = tmp_path / "landing" / "raw.csv"
    path.parent.mkdir()
    path.write_text("id,x\n1,1.5\n2,2.5\n3,-1\n")
    return path


def _etl(cluster: SparkCluster, tmp_path: Path, landing: Path, task_id: str, transform: str, **kwargs):
    from airflow_provider_dltrain.operators.spark import SparkToDeltaOperator

    return SparkToDeltaOperator(
        task_id=task_id,
        table_uri=str(tmp_path / "lake" / "t"),
        partition={"ds": DS},
        transform=transform,
        inputs={"raw": {"path": str(landing), "format": "csv", "options": {"header": "true"}}},
        engine="spark_submit",
        engine_options=_engine_options(cluster, tmp_path),
        poll_interval=0.5,
        **kwargs,
    )


def _apps(cluster: SparkCluster, name: str) -> tuple[list[dict], list[dict]]:
    """(active, completed) applications named ``name`` in the master's JSON."""
    state = cluster.status()
    return (
        [a for a in state.get("activeapps", []) if a.get("name") == name],
        [a for a in state.get("completedapps", []) if a.get("name") == name],
    )


def _ended_app(cluster: SparkCluster, name: str, timeout_s: float) -> list[dict]:
    """The completed applications named ``name``, once the master lists one and none active."""

    def ended() -> list[dict] | None:
        active, completed = _apps(cluster, name)
        return completed if completed and not active else None

    return list(_wait_for(ended, timeout_s, f"{name} to end on the master"))


def _wait_for(predicate, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _job_processes(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes mentioning ``marker`` (spark-submit, its driver)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline[:300]}")
    return found


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _active(tmp_path: Path, task_id: str) -> dict[str, Any]:
    path = tmp_path / "staging" / "runs" / _identity(task_id).task_key / "active.json"
    return dict(json.loads(path.read_text()))


def _submit_log(handle: dict[str, Any]) -> str:
    path = Path(handle["ids"]["log"])
    return path.read_text(errors="replace")[-6000:] if path.exists() else f"(no log at {path})"


def _rows(uri: str) -> list[dict]:
    table = open_table(uri).to_pyarrow_table().select(["id", "x2", "ds"])
    return sorted(table.to_pylist(), key=lambda r: r["id"])


EXPECTED = [
    {"id": 1, "x2": 3.0, "ds": DS},
    {"id": 2, "x2": 5.0, "ds": DS},
    {"id": 3, "x2": -2.0, "ds": DS},
]


def test_etl_runs_on_the_cluster_commits_once_and_a_rerun_commits_nothing(
    standalone_cluster, tmp_path, landing, monkeypatch
):
    cluster = standalone_cluster
    # An Airflow worker need not export these: the engine must hand the job (driver and the
    # executors' Python workers) this interpreter, not the ``python3`` on PATH (no pyarrow there).
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    op = _etl(cluster, tmp_path, landing, "ingest", "etl_jobs:double")
    started = time.monotonic()
    result = op.execute(_context("ingest"))
    print(f"spark-submit job of {op.task_id}: {time.monotonic() - started:.1f}s")
    handle = _active(tmp_path, "ingest")
    assert result["committed"] is True, _submit_log(handle)
    assert result["version"] == 0 and result["rows_written"] == 3
    assert result["uri"].rstrip("/").endswith(str(tmp_path / "lake" / "t"))
    assert _rows(str(tmp_path / "lake" / "t")) == EXPECTED
    commit = DeltaTable(str(tmp_path / "lake" / "t")).history()[0]
    assert commit["airflow.dag_id"] == DAG and commit["airflow.task_id"] == "ingest", commit
    assert commit["airflow.run_id"] == RUN, commit

    # The application ran on the cluster: the master lists it, finished, under the job's name, and
    # its executors ran on the workers (their work directories hold the application's id).
    job = _identity("ingest").job_name
    completed = _ended_app(cluster, job, 20)
    assert [a["state"] for a in completed] == ["FINISHED"], completed
    app_id = completed[0]["id"]
    assert len(list(cluster.work_dir.glob(f"worker-*/{app_id}/*/stderr"))) == 2, "executors did not run"

    # The job removed its copy of the code bundle (it runs on the Airflow worker, run after run).
    assert not list((tmp_path / "job-tmp").glob("dltrain-code-*"))

    # Same inputs again (the next try): the job finds the content already there and commits nothing.
    again = op.execute(_context("ingest", try_number=2))
    assert again["committed"] is False and again["version"] == 0, _submit_log(_active(tmp_path, "ingest"))
    assert DeltaLog(str(tmp_path / "lake" / "t")).latest_version() == 0


def _in_thread(fn, *args) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as err:  # handed to the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def test_a_failing_transform_fails_the_task_with_its_message_and_commits_nothing(
    standalone_cluster, tmp_path, landing
):
    op = _etl(
        standalone_cluster, tmp_path, landing, "broken", "etl_jobs:broken", transform_params={"why": "no ids"}
    )
    with pytest.raises(JobFailedError, match="transform refused the input: no ids") as raised:
        op.execute(_context("broken"))
    assert "Nothing was committed" in str(raised.value)
    assert not (tmp_path / "lake" / "t" / "_delta_log").exists()
    _, completed = _apps(standalone_cluster, _identity("broken").job_name)
    assert [a["state"] for a in completed] == ["FINISHED"], completed  # it did run on the cluster


def test_on_kill_ends_spark_submit_its_driver_and_the_cluster_app_and_commits_nothing(
    standalone_cluster, tmp_path, landing
):
    cluster = standalone_cluster
    op = _etl(cluster, tmp_path, landing, "killed", "etl_jobs:slow", transform_params={"seconds": 300})
    job = _identity("killed").job_name
    thread, out = _in_thread(op.execute, _context("killed"))
    # the application is on the cluster once the driver's SparkContext registered with the master
    active = _wait_for(lambda: _apps(cluster, job)[0], JOB_TIMEOUT_S, f"{job} running on the cluster")
    handle = _active(tmp_path, "killed")
    # and the driver is inside the stage (the transform sleeps once the inputs are read)
    _wait_for(lambda: "reading inputs" in _submit_log(handle), JOB_TIMEOUT_S, f"{job} to start its stage")
    spec = str(tmp_path / "staging" / "runs" / _identity("killed").task_key / "1" / "spec.json")
    assert _job_processes(spec), "spark-submit's driver is not running"

    op.on_kill()
    thread.join(60)
    assert not thread.is_alive(), "execute did not return after on_kill"
    assert isinstance(out.get("error"), JobFailedError), out
    assert "Nothing was committed" in str(out["error"])

    # spark-submit (the JVM), the Python driver it started and the executors of the app are all gone
    _wait_for(lambda: not _job_processes(spec), 30, f"the processes of {job} to end")
    app_id = active[0]["id"]
    _wait_for(lambda: not _job_processes(f"--app-id {app_id}"), 60, f"the executors of {app_id} to end")
    assert not _group_members(int(handle["ids"]["pid"])), "spark-submit's process group is still alive"
    completed = _ended_app(cluster, job, 60)
    assert [a["state"] for a in completed] in (["FINISHED"], ["KILLED"]), completed
    assert not (tmp_path / "lake" / "t" / "_delta_log").exists()


def test_a_retry_reattaches_to_the_running_job_and_returns_its_result(standalone_cluster, tmp_path, landing):
    cluster = standalone_cluster
    first_try = _etl(
        cluster,
        tmp_path,
        landing,
        "reattach",
        "submit_jobs:double_with_origin",
        transform_params={"seconds": 5},
    )
    thread, out = _in_thread(first_try.execute, _context("reattach"))
    job = _identity("reattach").job_name
    _wait_for(lambda: _apps(cluster, job)[0], JOB_TIMEOUT_S, f"{job} running on the cluster")
    submitted = _active(tmp_path, "reattach")

    # The worker died and Airflow retries: a new operator object, the next try number, same task.
    retry = _etl(cluster, tmp_path, landing, "reattach", "submit_jobs:double_with_origin")
    result = retry.execute(_context("reattach", try_number=2))
    thread.join(JOB_TIMEOUT_S)
    assert out.get("result") == result, out

    assert result["committed"] is True and result["version"] == 0 and result["rows_written"] == 3
    assert _active(tmp_path, "reattach") == submitted  # no second submission was recorded ...
    run_dir = tmp_path / "staging" / "runs" / _identity("reattach").task_key
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["1"]  # ... or staged
    assert not Path(submitted["ids"]["log"]).with_name(f"{_identity('reattach', 2).job_name}.log").exists()
    _, completed = _apps(cluster, job)
    assert len(completed) == 1 and not any(_apps(cluster, _identity("reattach", 2).job_name))

    table = open_table(str(tmp_path / "lake" / "t")).to_pyarrow_table()
    rows = sorted(table.select(["id", "x2", "ds"]).to_pylist(), key=lambda r: r["id"])
    assert rows == EXPECTED
    # the executors imported this provider from the staged bundle, ahead of their own PYTHONPATH
    bundle = Path(_staged_code(run_dir / "1" / "spec.json")).name
    origins = set(table.column("origin").to_pylist())
    assert all(f"/{bundle}/airflow_provider_dltrain/" in o for o in origins), origins
    assert any(cluster.work_dir.glob(f"worker-*/app-*/*/{bundle}")), "the bundle never reached an executor"


def _staged_code(spec_path: Path) -> str:
    return str(json.loads(spec_path.read_text())["code_uris"][0])


SCORE_ROWS = 300


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """``submit-digits`` v1 (a small MLP, pt2) in a SQLite store with artifacts under ``tmp_path``;
    an Airflow ``mlflow`` connection to it. Yields (connection id, the module)."""
    import mlflow
    import mlflow.pytorch
    import torch
    from inference_helpers import N_CLASSES, N_FEATURES, features

    from airflow_provider_dltrain.store.config import TrackingConfig

    tracking = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    torch.manual_seed(5)
    module = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, N_CLASSES)
    ).eval()
    with tracking.activated():
        experiment = mlflow.create_experiment("submit-scoring", artifact_location=str(tmp_path / "artifacts"))
        with mlflow.start_run(experiment_id=experiment):
            mlflow.pytorch.log_model(
                module,
                name="model",
                input_example=features(4, 0),
                registered_model_name="submit-digits",
                serialization_format="pt2",
                pip_requirements=["torch"],
            )
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_SUBMIT", json.dumps({"conn_type": "mlflow", "host": tracking.tracking_uri})
    )
    return "mlflow_submit", module


def test_batch_inference_scores_on_the_cluster_through_spark_submit(standalone_cluster, registered, tmp_path):
    import numpy as np
    from inference_helpers import arrow_rows, expected, features

    from airflow_provider_dltrain.lake import overwrite_partition
    from airflow_provider_dltrain.operators.inference import SparkBatchInferenceOperator

    conn_id, module = registered
    x = features(SCORE_ROWS, 11)
    source = overwrite_partition(str(tmp_path / "input"), arrow_rows(x, 0), {"ds": DS})
    out = str(tmp_path / "scores")
    op = SparkBatchInferenceOperator(
        task_id="score",
        model={"name": "submit-digits", "version": 1},
        input=source.to_dict(),
        table_uri=out,
        partition={"ds": DS},
        scoring={"feature_columns": ["features"], "key_columns": ["id"], "batch_size": 100},
        mlflow_conn_id=conn_id,
        engine="spark_submit",
        engine_options=_engine_options(standalone_cluster, tmp_path),
        poll_interval=0.5,
    )
    result = op.execute(_context("score"))
    assert result == {**DeltaLog(out).ref(0).to_dict(), "committed": True}, _submit_log(
        _active(tmp_path, "score")
    )

    table = open_table(out).to_pyarrow_table().sort_by("id")
    assert table.column("id").to_pylist() == list(range(SCORE_ROWS))
    labels, scores = expected(module, x)
    np.testing.assert_array_equal(table.column("prediction").to_numpy(), labels)
    np.testing.assert_allclose(table.column("score").to_numpy(), scores, rtol=1e-5)
    assert set(table.column("model_version").to_pylist()) == {1}
    assert set(table.column("model_name").to_pylist()) == {"submit-digits"}
    assert set(table.column("input_version").to_pylist()) == {source.version}
    assert set(table.column("ds").to_pylist()) == {DS}
    _, completed = _apps(standalone_cluster, _identity("score").job_name)
    assert [a["state"] for a in completed] == ["FINISHED"], completed
