"""The stack as users deploy it: ``docker/stack/compose.yaml`` with docker-compose, on the images of
``docker/images.py`` (``docker/stack/compose.offline.yaml``: no registry here, the fake AWS as the S3 store).

Postgres holds Airflow's metadata and MLflow's runs; api-server, scheduler (LocalExecutor, parallelism
4), dag-processor and triggerer run the unmodified example DAGs with the lake on S3; MLflow keeps its
artifacts on S3. The nightly for DAYS (the ingest DAG, then the retrain DAG, one date after the other,
through the REST call the UI makes) gives the answers; then a backfill of every date of the retrain
DAG, started from the UI in Chromium with two runs at a time, must really run side by side, train
nothing and leave every answer as the nightly left it; the scheduled run of the newest date waits for its
partition until it lands, late, and then passes. The deployment is locked down: published ports on
127.0.0.1 only, MLflow refuses anonymous writes, the fake AWS refuses other keys, and no zombie is left
in the scheduler's container after the runs. Screenshots and the services' logs go to
``$DLTRAIN_TEST_ARTIFACTS`` (or the test's tmp dir). At the end no container, network or volume of the
stack is left.

``make test-stack`` runs it (about 40 min with the images built; it is not part of ``make test``).
"""

from __future__ import annotations

import calendar
import contextlib
import json
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
    str(REPO / "docker" / "stack" / "compose.yaml"),
    "-f",
    str(REPO / "docker" / "stack" / "compose.offline.yaml"),
    # the opt-in that publishes the S3 store on 127.0.0.1: the test reads the lake from the host
    "-f",
    str(REPO / "docker" / "stack" / "compose.publish-s3.yaml"),
]
LONG_RUNNING = ["postgres", "s3", "mlflow", "api-server", "scheduler", "dag-processor", "triggerer"]


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
    password, mlflow_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    s3_key, s3_secret = f"key{secrets.token_hex(6)}", secrets.token_urlsafe(24)
    env_file = work / ".env"  # what a user's docker/stack/.env holds
    env_file.write_text(
        "\n".join(
            [
                f"POSTGRES_PASSWORD={secrets.token_urlsafe(16)}",
                f"AIRFLOW_DB_PASSWORD={secrets.token_urlsafe(16)}",
                f"MLFLOW_DB_PASSWORD={secrets.token_urlsafe(16)}",
                f"MLFLOW_ADMIN_PASSWORD={mlflow_password}",
                f"MLFLOW_SECRET_KEY={secrets.token_urlsafe(24)}",
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
            # MLflow's client in this process (the snapshots) logs in as the stack's admin
            mp.setenv("MLFLOW_TRACKING_USERNAME", "admin")
            mp.setenv("MLFLOW_TRACKING_PASSWORD", mlflow_password)
            yield {
                "api": api,
                "password": password,
                "mlflow_password": mlflow_password,
                "s3": (s3_key, s3_secret, f"http://127.0.0.1:{ports['s3']}"),
                "project": project,
                "tracking_uri": f"http://127.0.0.1:{ports['mlflow']}",
                "storage": storage,
                "run": run,
                # every secret of docker/stack/.env: none may show on a command line
                "secrets": {
                    name: value
                    for name, _, value in (line.partition("=") for line in env_file.read_text().splitlines())
                    if name.endswith(("PASSWORD", "SECRET", "SECRET_KEY"))
                },
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
    assert sorted(r["data_interval_start"][:10] for r in runs) == DAYS, runs
    assert _overlapping(runs), f"no two runs of the backfill ran side by side: {runs}"
    assert_reran_and_reproduced(api, runs, DAYS, before, stack["tracking_uri"], stack["storage"])


def _task_instance(api: AirflowApi, dag_id: str, run_id: str, task_id: str) -> dict:
    return api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")


def test_the_scheduled_run_waits_for_a_partition_that_lands_late_and_then_passes(stack, nightly):
    """With DLTRAIN_POLL_INTERVAL=1 the sensor once failed within about 130 s ("finished with state
    success, but the task instance's state attribute is running": a 1 s reschedule raced the scheduler).
    The run the scheduler made when the DAG was unpaused has waited the whole backfill for a date no
    one seeded; it must still be waiting, and pass once that date's partition lands."""
    api = stack["api"]
    (scheduled,) = api.call("GET", f"/api/v2/dags/{DAG}/dagRuns?run_type=scheduled&limit=100")["dag_runs"]
    ds, run_id = scheduled["data_interval_start"][:10], scheduled["dag_run_id"]
    assert ds not in DAYS and scheduled["state"] == "running", scheduled
    sensor = _task_instance(api, DAG, run_id, "wait_for_partition")
    assert sensor["state"] in ("running", "up_for_reschedule", "queued", "scheduled"), sensor
    assert sensor["try_number"] == 1, sensor
    started = calendar.timegm(time.strptime(sensor["start_date"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert time.time() - started > 150, f"the sensor has waited only {time.time() - started:.0f}s: {sensor}"

    # the date's images land late, and the ingest DAG writes its partition
    stack["run"]("exec", "-T", "scheduler", "dltrain", "demo", "seed", "--start", ds, "--days", "1",
                 "--per-day", str(PER_DAY))  # fmt: skip
    backfill = create_backfill(api, "dltrain_ingest", [ds], reprocess="completed")
    wait_for_backfill(api, backfill, "dltrain_ingest", 1, timeout=900)
    deadline = time.monotonic() + 900
    while (run := api.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}"))["state"] == "running":
        assert time.monotonic() < deadline, f"the scheduled run of {ds} did not finish: {run}"
        time.sleep(5)
    sensor = _task_instance(api, DAG, run_id, "wait_for_partition")
    assert (run["state"], sensor["state"], sensor["try_number"]) == ("success", "success", 1), (run, sensor)


_RESTATE = """
import csv, os, sys
from airflow_provider_dltrain.demo import paths
path = os.path.join(paths.landing(), sys.argv[1], "labels.csv")
with open(path, newline="") as fh:
    rows = list(csv.reader(fh))
rows[1][1] = str((int(rows[1][1]) + 1) % 10)
with open(path, "w", newline="") as fh:
    csv.writer(fh).writerows(rows)
"""


def _plan_in_page(page, dag_id: str, shot: Path) -> dict[str, tuple[str, str]]:
    """Open the backfills page for ``dag_id`` over DAYS (as the DAG page's "Backfill plan" link does):
    date -> (what the plan says it will do, its reasons), as the table shows them."""
    from playwright.sync_api import expect

    page.goto(f"/dltrain/backfills/?dag_id={dag_id}&start={DAYS[0]}&end={DAYS[-1]}")
    expect(page.locator("#planSection")).to_be_visible()
    shown = {}
    for ds in DAYS:
        row = page.locator(f'tr[data-testid="plan-{ds}"]')
        expect(row).to_be_visible()
        cells = row.locator("td")
        shown[ds] = (cells.nth(1).inner_text().strip(), cells.nth(2).inner_text())
    page.screenshot(path=str(shot), full_page=True)
    return shown


def test_the_plan_names_the_restated_date_and_what_depends_on_it_and_the_grid_shows_what_the_backfill_did(
    stack, nightly, artifacts
):
    """The backfills page of the provider's plugin, in Chromium on the deployed stack: after the data
    provider restates one date's labels, the plan of the ingest names exactly that date, and once it is
    ingested again the plan of the retrain DAG names it and every later date (their cut-offs include
    it) as *will recompute*, with the changed partition as the reason, and the earlier dates as *will
    skip*; after the backfill the verdict grid shows, date by date, what the plan predicted. Anonymous
    calls of the plugin's API get 401."""
    from playwright.sync_api import expect

    api = stack["api"]
    restated = DAYS[2]
    for path in ("plan", "verdicts"):
        url = f"{api.base}/dltrain/backfills/api/dags/{DAG}/{path}?start={DAYS[0]}&end={DAYS[-1]}"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=30)
        assert info.value.code == 401, path
    stack["run"]("exec", "-T", "scheduler", "python", "-c", _RESTATE, restated)
    with logged_in_page(api.base, "admin", stack["password"], DAG) as page:
        with shot_on_failure(page, artifacts, "backfill-plan"):
            ingest = _plan_in_page(page, "dltrain_ingest", artifacts / "backfill-plan-ingest.png")
            assert {ds: will for ds, (will, _) in ingest.items()} == {
                ds: "will recompute" if ds == restated else "will skip" for ds in DAYS
            }, ingest
            assert "labels" in ingest[restated][1], ingest[restated]
            backfill = create_backfill(api, "dltrain_ingest", [restated], reprocess="completed")
            wait_for_backfill(api, backfill, "dltrain_ingest", 1, timeout=900)

            plan = _plan_in_page(page, DAG, artifacts / "backfill-plan.png")
            expected = {ds: "will recompute" if ds >= restated else "will skip" for ds in DAYS}
            assert {ds: will for ds, (will, _) in plan.items()} == expected, plan
            planned = api.call(
                "GET", f"/dltrain/backfills/api/dags/{DAG}/plan?start={DAYS[0]}&end={DAYS[-1]}"
            )
            for day in planned["dates"][2:]:  # each recomputing date says which task computes and why
                assert day["reasons"] and all(why in plan[day["ds"]][1] for why in day["reasons"]), day
            assert planned["totals"]["will recompute"] == 3 and planned["totals"]["trainings"] == 3, planned
            backfill = create_backfill(api, DAG, DAYS, reprocess="completed")
            runs = wait_for_backfill(api, backfill, DAG, N_DAYS, timeout=1800)
            assert {r["state"] for r in runs} == {"success"}, runs

        # what the backfill did, date by date, as the plugin's API reports it
        verdicts = api.call(
            "GET", f"/dltrain/backfills/api/dags/{DAG}/verdicts?start={DAYS[0]}&end={DAYS[-1]}"
        )
        grid = {d["ds"]: d["verdict"] for d in verdicts["dates"]}
        assert set(grid) == set(DAYS), verdicts
        # what the plan predicted is what the backfill did
        did = {ds: "will skip" if v == "reproduced" else "will recompute" for ds, v in grid.items()}
        assert did == expected, grid
        assert {grid[ds] for ds in DAYS[2:]} <= {"changed", "recomputed"}, grid
        with shot_on_failure(page, artifacts, "backfill-verdicts"):
            # a fresh page: the one open since the plan still shows the grid it fetched then
            page.goto(f"/dltrain/backfills/?dag_id={DAG}&start={DAYS[0]}&end={DAYS[-1]}")
            expect(page.locator("#gridSection")).to_be_visible()
            for ds in DAYS:  # the grid shows each date's verdict (waits for the page's own fetch)
                expect(page.locator(f'button[data-testid="verdict-{ds}"]')).to_contain_text(grid[ds])
            expect(page.locator("#planSection")).to_be_visible()
            page.screenshot(path=str(artifacts / "backfill-verdicts.png"), full_page=True)
            page.locator(f'button[data-testid="verdict-{restated}"]').click()
            expect(page.locator("#dateSection")).to_be_visible()
            expect(page.get_by_role("heading", name="What changed")).to_be_visible()
            expect(page.get_by_role("heading", name=re.compile("^Lineage"))).to_be_visible()
            expect(page.locator("#date pre")).to_contain_text('"training_data"')  # the chain, not an error
            page.screenshot(path=str(artifacts / "backfill-date.png"), full_page=True)


def _container(stack: dict, service: str) -> str:
    return stack["run"]("ps", "-q", service).strip()


def test_published_ports_bind_to_loopback_only(stack):
    for service in ("api-server", "mlflow", "s3"):
        inspect = subprocess.run(
            ["docker", "inspect", "--format", "{{json .NetworkSettings.Ports}}", _container(stack, service)],
            capture_output=True,
            text=True,
            check=True,
        )
        bindings = [b for b in json.loads(inspect.stdout).values() if b]
        assert bindings, f"{service} publishes nothing"
        assert {b["HostIp"] for binding in bindings for b in binding} == {"127.0.0.1"}, (service, bindings)
    for service in ("postgres", "scheduler", "triggerer", "dag-processor"):
        inspect = subprocess.run(
            [
                "docker",
                "inspect",
                "--format",
                "{{json .HostConfig.PortBindings}}",
                _container(stack, service),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(inspect.stdout) in ({}, None), (service, inspect.stdout)


def test_mlflow_refuses_anonymous_writes_and_the_stack_user_may_write(stack):
    url = f"{stack['tracking_uri']}/api/2.0/mlflow/registered-models/create"
    body = json.dumps({"name": "intruder"}).encode()
    headers = {"Content-Type": "application/json"}
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), timeout=30)
    assert info.value.code == 401
    from mlflow import MlflowClient

    client = MlflowClient(stack["tracking_uri"])  # MLFLOW_TRACKING_USERNAME/PASSWORD of the fixture
    assert not client.search_registered_models(filter_string="name = 'intruder'")
    versions = client.search_model_versions(max_results=1)
    assert versions, "the nightly registered no model version"
    tag_url = f"{stack['tracking_uri']}/api/2.0/mlflow/model-versions/set-tag"
    tag = {"name": versions[0].name, "version": versions[0].version, "key": "owned", "value": "yes"}
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(
            urllib.request.Request(tag_url, json.dumps(tag).encode(), headers, method="POST"), timeout=30
        )
    assert info.value.code == 401


def test_the_fake_aws_refuses_other_keys_and_its_jobs_get_none_of_its_secrets(stack):
    from botocore.exceptions import ClientError

    from airflow_provider_dltrain.testing.fake_aws_process import client

    key, secret, endpoint = stack["s3"]
    with pytest.raises(ClientError) as info:
        client("s3", endpoint, credentials=("nobody", "wrong")).list_buckets()
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "lake" in {
        b["Name"] for b in client("s3", endpoint, credentials=(key, secret)).list_buckets()["Buckets"]
    }
    top = subprocess.run(
        ["docker", "top", _container(stack, "s3")], capture_output=True, text=True, check=True
    )
    assert secret not in top.stdout


def _zombies(stack: dict, service: str) -> set[str]:
    """``pid (comm)`` of the zombies in a service's container, from its ``/proc`` (the postgres image
    has no ``ps``; ``docker top`` lists the container's cgroup, which a zombie has already left)."""
    script = 'for f in /proc/[0-9]*/stat; do read -r line < "$f" && echo "$line"; done 2>/dev/null; true'
    out = stack["run"]("exec", "-T", service, "sh", "-c", script)
    zombies = set()
    for line in out.splitlines():
        head, _, rest = line.rpartition(")")  # "pid (comm) state ...": comm may hold spaces
        if rest.split()[:1] == ["Z"]:
            zombies.add(head + ")")
    return zombies


def test_no_zombie_in_any_long_running_container_after_the_runs(stack, nightly):
    """A zombie is a process no one reaps: one seen in three looks 2 s apart (a process that has just
    exited is a zombie for a moment, until its parent waits for it)."""
    for service in LONG_RUNNING:
        zombies = _zombies(stack, service)
        for _ in range(2):
            if not zombies:
                break
            time.sleep(2)
            zombies &= _zombies(stack, service)
        assert not zombies, f"{service}: {sorted(zombies)}"
        top = subprocess.run(
            ["docker", "top", _container(stack, service), "-eo", "pid,args"],
            capture_output=True,
            text=True,
            check=True,
        )
        shown = [name for name, secret in stack["secrets"].items() if secret and secret in top.stdout]
        assert not shown, f"{service} shows {shown} on a command line"


def test_airflow_and_mlflow_connect_with_their_own_postgres_roles(stack, nightly):
    """postgres-init.sql: the roles airflow and mlflow, not superusers, each on its own databases."""
    query = (
        "select r.rolname, r.rolsuper, coalesce(string_agg(distinct a.datname, ','), '') from pg_roles r "
        "left join pg_stat_activity a on a.usename = r.rolname "
        "where r.rolname in ('airflow', 'mlflow') group by r.rolname, r.rolsuper order by r.rolname"
    )
    out = stack["run"]("exec", "-T", "postgres", "psql", "-U", "postgres", "-Atc", query)
    rows = [line.split("|") for line in out.split()]
    assert [(name, superuser) for name, superuser, _ in rows] == [("airflow", "f"), ("mlflow", "f")], out
    databases = {name: set(dbs.split(",")) - {""} for name, _, dbs in rows}
    assert databases["airflow"] == {"airflow"}, out
    assert databases["mlflow"] and databases["mlflow"] <= {"mlflow", "mlflow_auth"}, out
