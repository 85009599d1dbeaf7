"""The stack as users deploy it: ``docker/compose.yaml`` with docker-compose, on the images of
``docker/images.py`` (``docker/compose.offline.yaml``: no registry here, the fake AWS as the S3 store).

Postgres holds Airflow's metadata and MLflow's runs; api-server, scheduler (LocalExecutor, parallelism
4), dag-processor and triggerer run the unmodified example DAGs with the lake on S3; MLflow keeps its
artifacts on S3. The nightly for DAYS (the ingest DAG, then the retrain DAG, one date after the other,
through the REST call the UI makes) gives the answers; then a backfill of every date of the retrain
DAG, started from the UI in Chromium with two runs at a time, must really run side by side, train
nothing and leave every answer as the nightly left it. Screenshots and the services' logs go to
``$DLTRAIN_TEST_ARTIFACTS`` (or the test's tmp dir). At the end no container, network or volume of the
stack is left.

``make test-stack`` runs it (about 15 min with the images built; it is not part of ``make test``).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest

from airflow_provider_dltrain.lake.storage import s3_storage_options
from tests.conftest import free_port
from tests.e2e.airflow_services import AirflowApi, wait_for_backfill, wait_for_dag
from tests.e2e.airflow_ui import fill_backfill_form, logged_in_page, shot_on_failure
from tests.e2e.backfill_checks import (
    assert_reran_and_reproduced,
    backfill_ids,
    create_backfill,
    snapshot,
    the_new_backfill,
)
from tests.support.artifacts import artifact_dir
from tests.support.images import REPO, ensure_images

pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.timeout(3600)]

FIRST, N_DAYS, PER_DAY = date(2026, 11, 20), 5, 60
DAYS = [(FIRST + timedelta(days=i)).isoformat() for i in range(N_DAYS)]
DAG = "dltrain_retrain"
COMPOSE_FILES = [
    "-f",
    str(REPO / "docker" / "compose.yaml"),
    "-f",
    str(REPO / "docker" / "compose.offline.yaml"),
]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, request) -> Iterator[Path]:
    with artifact_dir(
        tmp_path_factory, request, "compose-stack", "compose stack screenshots and logs"
    ) as path:
        yield path


def _objects(project: str) -> list[str]:
    """Containers, networks and volumes of the compose project that exist."""
    label = f"label=com.docker.compose.project={project}"
    found = []
    for kind, listing in (
        ("container", ["ps", "-a"]),
        ("network", ["network", "ls"]),
        ("volume", ["volume", "ls"]),
    ):
        out = subprocess.run(
            ["docker", *listing, "-q", "--filter", label], capture_output=True, text=True, check=True
        )
        found += [f"{kind} {ident}" for ident in out.stdout.split()]
    return found


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout:.0f}s") from None
            time.sleep(2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, artifacts) -> Iterator[dict]:
    tags = ensure_images(["airflow", "postgres"])
    work = tmp_path_factory.mktemp("stack")
    project = f"dltrain-stack-{uuid.uuid4().hex[:8]}"
    ports = {name: free_port() for name in ("airflow", "mlflow", "s3")}
    password = secrets.token_urlsafe(16)
    s3_key, s3_secret = f"key{secrets.token_hex(6)}", secrets.token_urlsafe(24)
    env_file = work / ".env"  # what a user's docker/.env holds
    env_file.write_text(
        "\n".join(
            [
                f"POSTGRES_PASSWORD={secrets.token_urlsafe(16)}",
                f"AIRFLOW_JWT_SECRET={secrets.token_urlsafe(32)}",
                f"DLTRAIN_S3_ACCESS_KEY={s3_key}",
                f"DLTRAIN_S3_SECRET_KEY={s3_secret}",
                f"AIRFLOW_ADMIN_PASSWORD={password}",
                f"DLTRAIN_AIRFLOW_PORT={ports['airflow']}",
                f"DLTRAIN_MLFLOW_PORT={ports['mlflow']}",
                f"DLTRAIN_S3_PORT={ports['s3']}",
                f"DLTRAIN_AIRFLOW_IMAGE={tags['airflow']}",
                f"DLTRAIN_POSTGRES_IMAGE={tags['postgres']}",
                # the tests' pace for the sensor and the jobs' status checks, as the other e2e tests
                "DLTRAIN_POLL_INTERVAL=1",
            ]
        )
        + "\n"
    )
    compose = ["docker-compose", "--env-file", str(env_file), "-p", project, *COMPOSE_FILES]

    def run(*args: str, timeout: float = 600) -> str:
        done = subprocess.run([*compose, *args], capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"docker-compose {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    try:
        run("up", "-d", "--no-build")
        _wait_http(f"http://127.0.0.1:{ports['airflow']}/api/v2/monitor/health", timeout=300)
        api = AirflowApi(f"http://127.0.0.1:{ports['airflow']}")
        api.log_in("admin", password)
        # the demo's landing zone, in the volume the scheduler's tasks read
        run(
            "exec",
            "-T",
            "scheduler",
            "dltrain",
            "demo",
            "seed",
            "--start",
            DAYS[0],
            "--days",
            str(N_DAYS),
            "--per-day",
            str(PER_DAY),
        )
        storage = s3_storage_options(
            access_key=s3_key,
            secret_key=s3_secret,
            region="us-east-1",
            endpoint_url=f"http://127.0.0.1:{ports['s3']}",
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DLTRAIN_LAKE_URI", "s3://lake/dltrain")  # what the stack's DAGs use
            yield {
                "api": api,
                "password": password,
                "tracking_uri": f"http://127.0.0.1:{ports['mlflow']}",
                "storage": storage,
                "run": run,
            }
    finally:
        with contextlib.suppress(Exception):
            (artifacts / "services.log").write_text(run("logs", "--no-color", "--timestamps", timeout=120))
        run("down", "--volumes", "--remove-orphans", "--timeout", "30", timeout=300)
    left = _objects(project)
    assert not left, f"the stack left {left}"


@pytest.fixture(scope="module")
def nightly(stack) -> dict:
    """Each date after the one before, as the scheduler's nightly runs would have done."""
    api = stack["api"]
    for dag_id in ("dltrain_ingest", DAG):
        wait_for_dag(api, dag_id, timeout=300)
        api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    for dag_id in ("dltrain_ingest", DAG):
        backfill = create_backfill(api, dag_id, DAYS)
        runs = wait_for_backfill(api, backfill, dag_id, N_DAYS, timeout=1800)
        assert {r["state"] for r in runs} == {"success"}, runs
        assert sorted(r["data_interval_start"][:10] for r in runs) == DAYS, runs
    return snapshot(DAYS, stack["tracking_uri"], stack["storage"])


def _overlapping(runs: list[dict]) -> list[tuple[str, str]]:
    spans = sorted((r["start_date"], r["end_date"], r["data_interval_start"][:10]) for r in runs)
    return [(a[2], b[2]) for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1]]


def test_a_ui_backfill_of_every_date_two_at_a_time_reproduces_the_nightly(stack, nightly, artifacts):
    from playwright.sync_api import expect

    api = stack["api"]
    before = nightly
    assert len(before["model_versions"]) >= 1 and set(before["champions"]) == set(DAYS)
    earlier = backfill_ids(api, DAG)
    with logged_in_page(api.base, "admin", stack["password"], DAG) as page:
        page.screenshot(path=str(artifacts / "retrain-after-nightly.png"))
        with shot_on_failure(page, artifacts, "backfill-form"):
            dialog = fill_backfill_form(page, DAG, DAYS[0], DAYS[-1], max_active_runs=2)
            page.screenshot(path=str(artifacts / "backfill-form.png"))
            dialog.get_by_role("button", name="Run Backfill").click()
            expect(dialog).to_be_hidden()
        created = the_new_backfill(api, DAG, earlier)
        assert created["max_active_runs"] == 2 and created["reprocess_behavior"] == "completed", created
        assert (created["from_date"][:10], created["to_date"][:10]) == (DAYS[0], DAYS[-1])
        runs = wait_for_backfill(api, created["id"], DAG, N_DAYS, timeout=1800)
        page.goto(f"/dags/{DAG}/runs")
        expect(page.get_by_text(re.compile(r"^backfill__")).first).to_be_visible()
        page.screenshot(path=str(artifacts / "backfill-runs.png"))
    runs = [r for r in runs if r["data_interval_start"][:10] in DAYS]
    assert len(runs) == N_DAYS, runs
    assert _overlapping(runs), f"no two runs of the backfill ran side by side: {runs}"
    assert_reran_and_reproduced(api, runs, DAYS, before, stack["tracking_uri"], stack["storage"])
