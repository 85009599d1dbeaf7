"""Test environment: everything local, nothing reaches the network.

Airflow reads its configuration at import, so the environment is set before anything imports it.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from airflow_provider_dltrain.demo.spark_cds import jvm_options
from airflow_provider_dltrain.utils.ports import free_port

# The fake AWS fixtures users get from the package's pytest11 entry point (fake_aws, fake_aws_server),
# loaded here by name too: the entry point has that name, so an installed entry point is not loaded twice.
pytest_plugins = [
    "airflow_provider_dltrain.testing.pytest_plugin",
    "tests.support.suite_timing",
    "tests.support.horovod",
]

REPO = Path(__file__).resolve().parents[1]
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="dltrain-tests-"))
_SESSION_PID = os.getpid()


@atexit.register
def _remove_session_home() -> None:
    """Each process that imported this module (the controller, each worker) removes its own home at exit;
    a forked child that exits through atexit leaves its parent's alone."""
    if os.getpid() == _SESSION_PID:
        shutil.rmtree(_SESSION_HOME, ignore_errors=True)


os.environ.setdefault("DLTRAIN_HOME", str(_SESSION_HOME / "home"))
os.environ["AIRFLOW_HOME"] = str(_SESSION_HOME / "airflow")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_SESSION_HOME / 'airflow' / 'airflow.db'}"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("DLTRAIN_SPARK_MASTER", "local[2]")
# Tests start dozens of short-lived JVMs (Spark sessions, jobs, a standalone cluster): the C1 JIT alone,
# the serial GC and the venv's class-data-sharing archive (``make install`` writes it) start each one in
# about half the time; long jobs would want the defaults, tests never do.
_JAVA_OPTS = jvm_options()
os.environ.setdefault("JAVA_TOOL_OPTIONS", _JAVA_OPTS)
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
# the example DAGs check their jobs every second (15-60 s by default): the fake AWS runs each job in seconds
os.environ.setdefault("DLTRAIN_POLL_INTERVAL", "1")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
# OpenLineage is installed: keep it off unless a test turns it on (tests/lineage) for its own runs
os.environ.setdefault("AIRFLOW__OPENLINEAGE__DISABLED", "true")
(_SESSION_HOME / "airflow").mkdir(parents=True, exist_ok=True)


def wait_for_port(port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout}s")


@pytest.fixture(scope="session")
def spark():
    from airflow_provider_dltrain.etl.spark import spark_session

    session = spark_session(master="local[2]", app_name="dltrain-tests")
    yield session


_DB_TEMPLATE = _SESSION_HOME / "airflow-db-template" / "airflow.db"


def migrated_airflow_db(env: dict[str, str]) -> None:
    """Give ``env``'s SQLite metadata DB the current schema: ``airflow db migrate`` runs once per session
    (~15 s on 2 cores) into a template, which every later home gets a copy of. A DB that exists is kept."""
    import shutil

    conn = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert conn.startswith("sqlite:///"), conn
    target = Path(conn[len("sqlite:///") :])
    if target.exists():
        return
    if not _DB_TEMPLATE.exists():
        home = _DB_TEMPLATE.parent
        home.mkdir(parents=True, exist_ok=True)
        template_env = {
            **env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_DB_TEMPLATE}",
        }
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=template_env,
            check=True,
            capture_output=True,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_DB_TEMPLATE, target)
    Path(env.get("AIRFLOW_HOME", target.parent)).mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session", autouse=True)
def _copy_migrated_airflow_dbs():
    """The demo's ``ensure_airflow_db`` copies the session's migrated DB instead of migrating each home."""
    from airflow_provider_dltrain.demo import run

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "ensure_airflow_db", migrated_airflow_db)
        yield


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata DB for tests that run DAGs (``dag.test`` or ``airflow dags test``)."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


@pytest.fixture(scope="session")
def moto_server():
    """A real moto server on loopback; yields its endpoint URL. Stopped at the end, also on failure."""
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def s3_bucket(moto_server):
    """A fresh bucket on the moto server; yields ``(bucket, storage_options)``."""
    import uuid

    import boto3

    from airflow_provider_dltrain.lake.storage import s3_storage_options

    bucket = f"dltrain-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    options = s3_storage_options(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_url=moto_server,
        allow_unsafe_rename=True,
    )
    return bucket, options


@pytest.fixture
def mlflow_uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def pytest_sessionfinish(session, exitstatus):
    """Stop any Spark session while logging still works (py4j logs from its finalizers otherwise)."""
    import sys as _sys

    if "pyspark" not in _sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


_MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True, scope="module")
def _module_keeps_mlflow_env():
    """A module that points MLflow at its own server (the UI test) leaves no URI for the next module:
    the demo's ``airflow_env`` passes ``MLFLOW_TRACKING_URI`` on to every DAG run."""
    saved = {k: os.environ.get(k) for k in _MLFLOW_ENV}
    yield
    _restore_env(saved)


@pytest.fixture(autouse=True)
def _test_keeps_mlflow_env():
    saved = {k: os.environ.get(k) for k in _MLFLOW_ENV}
    yield
    _restore_env(saved)


def _provider_logging_changed() -> str | None:
    """What a test or an imported test module changed on the provider's logger, or None.

    Another test's ``caplog`` reads the provider's warnings through the root logger: a level raised,
    propagation cut or the logger disabled there silences them for every later test in the worker.
    """
    logger = logging.getLogger("airflow_provider_dltrain")
    silenced = logger.level > logging.WARNING or logging.root.manager.disable >= logging.WARNING
    if silenced or logger.disabled or not logger.propagate:
        return (
            f"level {logging.getLevelName(logger.level)}, disabled {logger.disabled}, propagate "
            f"{logger.propagate}, logging.disable({logging.root.manager.disable})"
        )
    return None


def pytest_collection_finish(session):
    changed = _provider_logging_changed()
    if changed:
        raise pytest.UsageError(f"a test module changed the provider's logger at import: {changed}")


@pytest.fixture(autouse=True)
def _test_keeps_provider_logging():
    yield
    changed = _provider_logging_changed()
    if changed:
        logger = logging.getLogger("airflow_provider_dltrain")
        logger.setLevel(logging.NOTSET)
        logger.disabled, logger.propagate = False, True
        logging.disable(logging.NOTSET)
        pytest.fail(f"the test left the provider's logger changed ({changed}): restore what you change")


def pytest_collection_modifyitems(config, items):
    """The longest files first, so that ``make test``'s workers (``-n 2 --dist loadfile``) start the long
    files at once and the short ones fill in at the end; the container tier after them (its images are
    built in the background meanwhile); ``tests/cluster`` stays last (its own hook, run before this
    one: the sort is stable)."""
    from tests.support.suite_timing import check_heavy_reasons, file_of, known_durations

    check_heavy_reasons(items)
    cluster = REPO / "tests" / "cluster"
    # the longest files first (seconds recorded in tests/durations.json; a new file counts as 30 s when
    # slow, 1 s otherwise), so that neither worker is left with a long file at the end
    seconds = known_durations()

    def expected(item: pytest.Item) -> float:
        return seconds.get(file_of(item.nodeid), 30.0 if "slow" in item.keywords else 1.0)

    # Horovod is built beside the suite (tests/support/horovod.py): the files that need it come after
    horovod = {file_of(item.nodeid) for item in items if "horovod" in item.keywords}
    items.sort(
        key=lambda item: (
            cluster in Path(str(item.path)).parents,
            "containers" in item.keywords,
            file_of(item.nodeid) in horovod,
            -expected(item),
        )
    )
