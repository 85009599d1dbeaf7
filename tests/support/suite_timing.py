"""Where the suite's time goes, and a guard that keeps it short.

At the end of a run this plugin prints the suite's wall time, the ten slowest files (setup, call and
teardown of all their tests, module fixtures included) and, under pytest-xdist, how long each worker
was busy and how long it idled at the end waiting for the other. It writes every file's time to
``$DLTRAIN_HOME/test-durations.json`` (``make test`` starts it afresh); ``make test-durations``
copies that into ``tests/durations.json``, which orders the next run: with ``--dist loadfile`` a worker takes the next
file in collection order, so the longest files go first and the short ones fill in behind them
(longest processing time first), and neither worker is left with a long file at the end.

A new file (one ``tests/durations.json`` does not list yet) slower than ``DLTRAIN_SLOW_FILE_S`` seconds
(60, stretched by the factor a fixed piece of work is slower on this machine than on a quiet one) fails
the run unless it is in the accepted heavy tier,
with the reason it is heavy: listed in :data:`HEAVY` below, or its module says
``pytestmark = [pytest.mark.heavy("a whole nightly through Airflow")]``.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
_LIMIT_ENV = "DLTRAIN_SLOW_FILE_S"


# A fixed piece of pure-Python work and its time on a quiet machine of the project's kind: a loaded or
# slower machine stretches the limit by the same factor, so the guard flags slow files, not slow hosts.
_REFERENCE_S = 0.12


def _reference_work() -> float:
    began = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i % 7
    return time.perf_counter() - began


def _limit() -> float:
    return float(os.environ.get(_LIMIT_ENV, "60")) * max(1.0, _SLOWDOWN)


_SLOWDOWN = 1.0


# The accepted heavy tier: files allowed over the slow-file limit, each with the reason it is heavy.
# A new file joins only with a reason here (or pytest.mark.heavy("why") in the module).
HEAVY: dict[str, str] = {
    "tests/cluster/test_cluster_etl.py": "a Spark standalone cluster (a master and two workers) runs the stage",
    "tests/cluster/test_cluster_scoring.py": "a Spark standalone cluster (a master and two workers) runs the stage",
    "tests/cluster/test_cluster_training.py": "a Spark standalone cluster (a master and two workers) runs the stage",
    "tests/cluster/test_spark_submit_engine.py": "a Spark standalone cluster (a master and two workers) runs the stage",
    "tests/containers/test_ec2_hosts.py": "jobs run inside the container tier's Docker images",
    "tests/containers/test_image_prune.py": "jobs run inside the container tier's Docker images",
    "tests/containers/test_job_images.py": "jobs run inside the container tier's Docker images",
    "tests/containers/test_kubeflow_trainjobs.py": "jobs run inside the container tier's Docker images",
    "tests/dags/test_ingest_dag.py": "a DAG run through airflow dags test",
    "tests/e2e/test_asset_watcher.py": "whole DAG runs through Airflow (ingest, training, gate, scoring) on the demo's defaults",
    "tests/e2e/test_nightly_then_backfill.py": "whole DAG runs through Airflow (ingest, training, gate, scoring) on the demo's defaults",
    "tests/e2e/test_no_secrets_leak.py": "whole DAG runs through Airflow (ingest, training, gate, scoring) on the demo's defaults",
    "tests/e2e/test_ui_browser.py": "whole DAG runs through Airflow (ingest, training, gate, scoring) on the demo's defaults",
    "tests/engines/test_cleared_task.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_cloud_dags.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_cloud_operators.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_ray_training.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_reaper.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_sagemaker_training.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_sagemaker_mpi.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_stage_engines.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/engines/test_stage_engines_scoring.py": "cloud jobs really run on the fake AWS: a Spark or torch process per job",
    "tests/etl/test_crash_and_race.py": "Spark writers killed and racing on real tables",
    "tests/experiments/test_search_dag.py": "the search DAG's Optuna study through airflow dags test",
    "tests/lineage/test_openlineage_events.py": "a DAG run through airflow dags test",
    "tests/registry/test_credentials_scoped.py": "a real mlflow server with authentication",
    "tests/registry/test_registry_mlflow_server.py": "a real mlflow server with authentication",
    "tests/sensors/test_sensor_dag_run.py": "a DAG run through airflow dags test",
    "tests/stack/test_compose_backfill.py": "the compose deployment (make test-stack only)",
    "tests/test_backfill_plan.py": "the plan against real DAG runs, Delta tables and an MLflow store",
    "tests/test_backfills_plugin.py": "the plugin's routes on a real Airflow metadata DB, DAG runs and MLflow store",
    "tests/testing/test_user_cloud_dag.py": "a user's DAG on the fake AWS with Ray, through airflow dags test",
    "tests/training/test_determinism.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_failed_runs.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_non_finite.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_train_entry_horovod.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_train_operator.py": "the training operator through airflow dags test",
    "tests/training/test_training_ddp.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_training_forked_ddp.py": "torch ranks (DDP, Horovod) train in processes of their own",
    "tests/training/test_training_horovod.py": "torch ranks (DDP, Horovod) train in processes of their own",
}


def _recorded() -> dict[str, float | None]:
    try:
        return dict(json.loads(DURATIONS.read_text()))
    except (OSError, ValueError):
        return {}


def known_durations() -> dict[str, float]:
    """Seconds per test file (path relative to the repository) from the last recorded run."""
    return {k: float(v) for k, v in _recorded().items() if v is not None}


def recorded_files() -> set[str]:
    """The files ``tests/durations.json`` lists (``null``: listed before its seconds were measured):
    a file not among them is new, and a new file over the limit fails the run."""
    return set(_recorded())


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class SuiteTiming:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.per_file: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.heavy: set[str] = set()
        self.busy: dict[str, float] = defaultdict(float)
        self.last_seen: dict[str, float] = {}
        self.too_slow: list[tuple[str, float]] = []
        self.slow_known: list[tuple[str, float]] = []
        self.reference = _reference_work()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = file_of(report.nodeid)
        self.per_file[name] += report.duration
        if report.when == "call":
            self.tests[name] += 1
        if "heavy" in report.keywords:
            self.heavy.add(name)
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
        self.busy[worker] += report.duration
        self.last_seen[worker] = time.monotonic()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        global _SLOWDOWN
        if hasattr(session.config, "workerinput"):
            return  # a worker: the controller sums every worker's reports
        _SLOWDOWN = min(self.reference, _reference_work()) / _REFERENCE_S
        limit = _limit()
        over = sorted(
            ((f, s) for f, s in self.per_file.items() if s > limit and f not in self.heavy),
            key=lambda fs: -fs[1],
        )
        known = recorded_files()
        self.too_slow = [(f, s) for f, s in over if f not in known]
        self.slow_known = [(f, s) for f, s in over if f in known]
        if self.too_slow and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        home = os.environ.get("DLTRAIN_HOME")
        if home and self.per_file:
            # merged: make test's later runs (the cluster tests) add their files to the 2-worker run's
            out = Path(home) / "test-durations.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                seconds = json.loads(out.read_text())
            except (OSError, ValueError):
                seconds = {}
            seconds.update({f: round(s, 1) for f, s in self.per_file.items()})
            out.write_text(json.dumps(dict(sorted(seconds.items())), indent=1))

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not self.per_file:
            return
        end = time.monotonic()
        write = terminalreporter.write_line
        terminalreporter.section("suite timing")
        write(
            f"wall time {end - self.start:.0f} s; test time {sum(self.per_file.values()):.0f} s; "
            f"slow-file limit {_limit():.0f} s (reference work x{_SLOWDOWN:.2f})"
        )
        for name, secs in sorted(self.per_file.items(), key=lambda fs: -fs[1])[:10]:
            write(
                f"  {secs:7.1f} s  {self.tests[name]:4d} tests  {name}{'  (heavy)' if name in self.heavy else ''}"
            )
        if len(self.busy) > 1:
            for worker in sorted(self.busy):
                idle = end - self.last_seen[worker]
                write(f"  {worker}: busy {self.busy[worker]:.0f} s, idle at the end {idle:.0f} s")
        for name, secs in self.slow_known:
            write(
                f"slow file {name}: {secs:.0f} s > {_limit():.0f} s: make it faster or add it to HEAVY with its reason"
            )
        for name, secs in self.too_slow:
            write(
                f"SLOW FILE {name}: {secs:.0f} s > {_limit():.0f} s ({_LIMIT_ENV}). Make it faster (share the "
                "expensive setup, test the decision without Airflow or Spark) or mark the module "
                'pytest.mark.heavy("<why it must be this heavy>").',
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "heavy(reason): an accepted heavy test file (over the slow-file limit), with the reason"
    )
    config.pluginmanager.register(SuiteTiming(), "dltrain-suite-timing")


def check_heavy_reasons(items: list[pytest.Item]) -> None:
    """Mark the files of :data:`HEAVY`; a ``heavy`` mark must say why: refuse one without a reason."""
    for item in items:
        if file_of(item.nodeid) in HEAVY:
            item.add_marker(pytest.mark.heavy(HEAVY[file_of(item.nodeid)]))
        mark = item.get_closest_marker("heavy")
        if mark is not None and not (mark.args and isinstance(mark.args[0], str) and mark.args[0].strip()):
            raise pytest.UsageError(f'{item.nodeid}: pytest.mark.heavy needs its reason, e.g. heavy("why")')
