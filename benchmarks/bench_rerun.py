"""An unchanged re-run costs (almost) nothing: locally in time, on the fake AWS in cloud jobs.

- **local**: the demo DAGs (``dltrain_ingest`` then ``dltrain_retrain``) for date D2 on the embedded
  defaults, in one runner process warmed up by a run of D1 (Airflow and Spark already started). The
  first run of D2 ingests, trains, registers and scores; the unchanged re-run of D2 right after it
  should find everything unchanged before starting any work. Ratio: re-run ÷ first run, goal ≤ 0.15.
  Printed beside it: Airflow's floor, the same two DAG runs with tasks that do nothing (DAGs of the same
  shape and trigger rules whose ``train`` skips, as an unchanged one does), and the re-run's time above it.
- **cloud**: the same DAGs for one date with ETL and scoring on Glue and training on SageMaker, on
  the fake AWS (``airflow_provider_dltrain.testing``, a child process). The figure is the number of
  cloud job runs (Glue job runs + SageMaker training jobs) the unchanged re-run submitted, counted
  through the services' APIs before and after it. Goal: 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

D1 = date(2026, 11, 24)
D2 = D1 + timedelta(days=1)
FAST = {"epochs": 3, "batch_size": 32, "lr": 0.003, "seed": 7}


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _day(ds: str, conf: dict[str, Any] | None = None) -> list[tuple[str, str, Any]]:
    """Both demo DAGs for ``ds``; ``conf=None``: the demo's own hyper-parameters, as ``make demo`` runs them."""
    return [("dltrain_ingest", ds, None), ("dltrain_retrain", ds, conf)]


def _timed(runner: Any, runs: list[tuple[str, str, Any]]) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    outcomes = runner.run(runs)
    bad = [o for o in outcomes if not o.ok]
    if bad or len(outcomes) != len(runs):
        raise RuntimeError(f"a benchmark run failed: {bad[0].tail if bad else outcomes}")
    return time.perf_counter() - started, outcomes


# Airflow's own floor: DAGs of the demo DAGs' shape, schedule and trigger rules whose tasks do nothing,
# with the outcome of an unchanged re-run: ``train`` skipped, ``register`` (none_failed) skipping itself as
# RegisterModelOperator does without a train_result, ``score`` (none_failed) and ``lineage`` run. Run the
# same way as the demo DAGs.
FLOOR_DAGS = """
from datetime import datetime

from airflow.exceptions import AirflowSkipException
from airflow.sdk import DAG, BaseOperator, chain
from airflow.timetables.interval import CronDataIntervalTimetable


class Nothing(BaseOperator):  # not an EmptyOperator: Airflow marks those done without running them
    def execute(self, context):
        return None


class Unchanged(BaseOperator):
    def execute(self, context):
        raise AirflowSkipException("unchanged")


def _dag(dag_id):
    return DAG(dag_id=dag_id, schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
               start_date=datetime(2026, 11, 1), catchup=False)


with _dag("floor_ingest") as floor_ingest:
    Nothing(task_id="ingest_images")

with _dag("floor_retrain") as floor_retrain:
    chain(Nothing(task_id="wait_for_partition"), Unchanged(task_id="train"),
          Unchanged(task_id="register", trigger_rule="none_failed"),
          Nothing(task_id="score", trigger_rule="none_failed"), Nothing(task_id="lineage"))
"""


def _dags_with_floor(folder: Path) -> str:
    """The demo's DAG files and the floor DAGs in ``folder`` (a runner parses every file of its folder)."""
    from airflow_provider_dltrain.demo.run import dags_folder

    for source in Path(dags_folder()).glob("*.py"):
        (folder / source.name).write_text(source.read_text())
    (folder / "floor_dags.py").write_text(FLOOR_DAGS)
    return str(folder)


def _local() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-rerun-") as home, _env(DLTRAIN_HOME=home):
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import DagRunner, airflow_env
        from airflow_provider_dltrain.demo.seed import seed

        seed(paths.landing(), D1, 2)  # the demo's dates, as `make demo` seeds them
        dags = Path(home) / "dags"
        dags.mkdir()
        with _env(DLTRAIN_DAGS_FOLDER=_dags_with_floor(dags)), DagRunner(airflow_env()) as runner:
            warm, _ = _timed(runner, _day(D1.isoformat()))
            first, _ = _timed(runner, _day(D2.isoformat()))
            again, outcomes = _timed(runner, _day(D2.isoformat()))
            floor_runs = [("floor_ingest", D2.isoformat(), None), ("floor_retrain", D2.isoformat(), None)]
            _timed(runner, floor_runs)  # the first run of a DAG also writes it to the DB
            floor, _ = _timed(runner, floor_runs)
    verdicts = [o.state.get("report", {}).get("verdict") for o in outcomes]
    return {
        "name": "unchanged re-run of one demo date / its first run (local)",
        "ratio": again / first,
        "goal": "<= 0.15",
        "detail": (
            f"re-run {again:.1f}s vs first run {first:.1f}s (warm-up date {warm:.1f}s); verdicts {verdicts}; "
            f"Airflow's floor (the same two DAG runs, tasks doing nothing, train skipped) {floor:.1f}s: the provider's share of "
            f"the re-run {max(again - floor, 0.0):.1f}s = {max(again - floor, 0.0) / first:.3f} of the first run"
        ),
    }


def _job_runs(fake: Any) -> int:
    glue = fake.client("glue")
    runs = sum(len(glue.get_job_runs(JobName=j["Name"])["JobRuns"]) for j in glue.get_jobs()["Jobs"])
    return runs + len(fake.client("sagemaker").list_training_jobs()["TrainingJobSummaries"])


def _cloud() -> dict[str, Any]:
    from airflow_provider_dltrain.testing.fake_aws_process import start_fake_aws

    with (
        tempfile.TemporaryDirectory(prefix="bench-rerun-aws-") as work,
        start_fake_aws(Path(work) / "fake", verbose=False) as fake,
    ):
        fake.create_bucket("bench-lake")
        staging = "s3://bench-lake/staging"
        training = {
            "staging_uri": staging,
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "image_uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311",
            "processes_per_host": 2,
        }
        glue = {"staging_uri": staging, "role": "arn:aws:iam::123456789012:role/GlueRole"}
        with _env(
            **fake.env,
            DLTRAIN_HOME=str(Path(work) / "home"),
            DLTRAIN_LAKE_URI="s3://bench-lake/lake",
            DLTRAIN_AWS_CONN_ID="aws",
            DLTRAIN_ENGINE="glue",
            DLTRAIN_ENGINE_OPTIONS=json.dumps(glue),
            DLTRAIN_TRAIN_BACKEND="sagemaker",
            DLTRAIN_TRAIN_BACKEND_OPTIONS=json.dumps(training),
            DLTRAIN_POLL_INTERVAL="1",
        ):
            from airflow_provider_dltrain.demo import paths
            from airflow_provider_dltrain.demo.run import DagRunner, airflow_env
            from airflow_provider_dltrain.demo.seed import seed

            seed(paths.landing(), D1, 1, per_day=120)
            with DagRunner(airflow_env()) as runner:
                first, _ = _timed(runner, _day(D1.isoformat(), {"hparams": FAST}))
                before = _job_runs(fake)
                again, outcomes = _timed(runner, _day(D1.isoformat(), {"hparams": FAST}))
                after = _job_runs(fake)
        leaks = fake.leaks()
    if leaks:
        raise RuntimeError(f"the cloud benchmark left resources behind: {leaks}")
    verdicts = [o.state.get("report", {}).get("verdict") for o in outcomes]
    return {
        "name": "cloud job runs submitted by an unchanged re-run of one date (fake AWS)",
        "ratio": float(after - before),
        "goal": "<= 0",
        "detail": f"{before} job runs after the first run (Glue ETL + SageMaker training + Glue scoring), "
        f"{after} after the re-run; first run {first:.1f}s, re-run {again:.1f}s; verdicts {verdicts}",
    }


def run() -> list[dict[str, Any]]:
    return [_local(), _cloud()]
