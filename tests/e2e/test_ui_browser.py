"""A real scheduler path, and the Airflow UI in headless Chromium, against a real Airflow on 127.0.0.1.

api-server (with a login) + scheduler + dag-processor on the LocalExecutor, an ``mlflow server`` for
tracking (so the "MLflow run" link has a page to point at) and the fake AWS running the Spark stages
as Glue jobs (so the "Job console" link has a job). Backfills of DAYS are created through
``POST /api/v2/backfills`` — the call the UI's backfill dialog makes — for the ingest DAG, then the
retrain DAG; the browser then logs in, checks the graph and the extra links, and re-runs the first day
from the backfill form, which must give the nightly answer again. Screenshots go to
``$DLTRAIN_TEST_ARTIFACTS`` (or the test's tmp dir); where is printed at the end.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from airflow_provider_dltrain.testing.fake_aws_process import FakeAws, start_fake_aws
from tests.e2e.airflow_services import PASSWORD, USER, airflow_services, wait_for_backfill, wait_for_dag
from tests.e2e.airflow_ui import fill_backfill_form, logged_in_page, shot_on_failure
from tests.e2e.backfill_checks import (
    assert_reran_and_reproduced,
    backfill_ids,
    create_backfill,
    snapshot,
    the_new_backfill,
)
from tests.e2e.side_services import mlflow_server
from tests.support.artifacts import artifact_dir

# Minutes on a quiet machine; the first test also waits for the services and the backfills.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

DAG = "dltrain_retrain"
# One day: backfills over many days, each with the champion for it, are the nightly test's; this one
# is about what a user sees of a backfill in the UI and what its form starts.
DAYS = ["2026-11-24"]
DAY = DAYS[0]  # the day re-run from the form
PER_DAY = 120
# what each node of the retrain graph must show: our operator classes
TASK_TYPES = {
    "wait_for_partition": "DeltaTableVersionSensor",
    "train": "TrainModelOperator",
    "register": "RegisterModelOperator",
    "score": "SparkBatchInferenceOperator",
    "lineage": "DeltaLineageOperator",
}
SCORE_JOB = "dltrain-dltrain_retrain-score"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, request) -> Iterator[Path]:
    with artifact_dir(tmp_path_factory, request, "ui-browser", "UI screenshots and service logs") as path:
        yield path


@pytest.fixture(scope="module")
def stack(tmp_path_factory, artifacts) -> Iterator[dict]:
    """The demo's nightly for DAYS done: backfills of the ingest, then the retrain DAG, through the REST API."""
    tmp = tmp_path_factory.mktemp("ui-stack")
    with pytest.MonkeyPatch.context() as mp, start_fake_aws(artifacts / "fake-aws") as aws:
        mp.setenv("DLTRAIN_HOME", str(tmp / "home"))
        with mlflow_server(tmp / "mlflow", artifacts / "mlflow.log") as tracking_uri:
            mp.setenv("MLFLOW_TRACKING_URI", tracking_uri)
            env = _demo_env(aws, mp)
            with airflow_services(tmp / "airflow", env, artifacts, login=True) as api:
                for dag_id in ("dltrain_ingest", DAG):
                    wait_for_dag(api, dag_id)
                    api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
                for dag_id in ("dltrain_ingest", DAG):
                    backfill = create_backfill(api, dag_id, DAYS)
                    runs = wait_for_backfill(api, backfill, dag_id, len(DAYS), timeout=900)
                    assert {r["state"] for r in runs} == {"success"}, runs
                    # one run per day, each on the interval [day, day+1) of the data-interval timetable
                    assert sorted(r["data_interval_start"][:10] for r in runs) == DAYS, runs
                (run,) = [r for r in runs if r["data_interval_start"][:10] == DAY]
                yield {"api": api, "aws": aws, "tracking_uri": tracking_uri, "run": run}
        assert not aws.leaks(), "cloud resources left running"


def _demo_env(aws: FakeAws, mp: pytest.MonkeyPatch) -> dict[str, str]:
    """Seed DAY; the Spark stages as Glue jobs on the fake AWS; the Airflow environment."""
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env
    from airflow_provider_dltrain.demo.seed import seed

    seed(paths.landing(), date.fromisoformat(DAYS[0]), len(DAYS), per_day=PER_DAY)
    bucket = f"ui-{uuid.uuid4().hex[:10]}"
    aws.create_bucket(bucket)
    options = {"staging_uri": f"s3://{bucket}/staging", "role": "arn:aws:iam::123456789012:role/GlueRole"}
    mp.setenv("DLTRAIN_ENGINE", "glue")
    mp.setenv("DLTRAIN_ENGINE_OPTIONS", json.dumps(options))
    mp.setenv("DLTRAIN_AWS_CONN_ID", "aws_lake")
    mp.setenv("AIRFLOW_CONN_AWS_LAKE", aws.conn_json)
    env = airflow_env()
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"  # only backfills create runs
    return env


@pytest.fixture(scope="module")
def page(stack):
    """A logged-in Chromium page on the api-server."""
    with logged_in_page(stack["api"].base, USER, PASSWORD, DAG) as page:
        yield page


def test_the_backfills_scored_every_image_of_every_day_once_with_the_champion_for_it(stack):
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.registry import champion_as_of
    from airflow_provider_dltrain.store.config import TrackingConfig
    from tests.e2e.backfill_checks import MODEL, partition_rows

    tracking = TrackingConfig(tracking_uri=stack["tracking_uri"])
    for ds in DAYS:
        rows = [json.loads(r) for r in partition_rows(paths.table("digit_predictions"), ds)]
        assert len(rows) == PER_DAY and len({r["source_file"] for r in rows}) == PER_DAY, ds
        assert {r["model_version"] for r in rows} == {champion_as_of(tracking, MODEL, ds).version}, ds


def test_retrain_graph_shows_every_task_with_its_operator_class(page, artifacts):
    from playwright.sync_api import expect

    page.goto(f"/dags/{DAG}")
    with shot_on_failure(page, artifacts, "graph"):
        page.get_by_role("button", name=re.compile("Graph")).first.click()
        for task_id, operator in TASK_TYPES.items():
            node = page.get_by_test_id(f"rf__node-{task_id}")
            expect(node).to_be_visible()
            expect(node).to_contain_text(task_id)
            expect(node).to_contain_text(operator)
        for up, down in itertools.pairwise(TASK_TYPES):
            expect(page.get_by_test_id(f"rf__edge-{up}-{down}")).to_be_attached()
    page.screenshot(path=str(artifacts / "retrain-graph.png"))


def test_task_pages_link_to_the_mlflow_run_and_the_glue_job_run(page, stack, artifacts):
    from playwright.sync_api import expect

    from airflow_provider_dltrain.store.config import TrackingConfig
    from tests.e2e.backfill_checks import MODEL

    run_id = stack["run"]["dag_run_id"]
    links = {}
    for task_id, name in (("train", "MLflow run"), ("score", "Job console")):
        page.goto(f"/dags/{DAG}/runs/{run_id}/tasks/{task_id}/details")  # Extra Links are there
        with shot_on_failure(page, artifacts, f"task-{task_id}"):
            link = page.get_by_role("link", name=name, exact=True)
            expect(link).to_be_visible()
            links[task_id] = link.get_attribute("href") or ""
        page.screenshot(path=str(artifacts / f"task-{task_id}-links.png"))

    # the MLflow page of the run that trained the champion for DAY
    found = re.fullmatch(
        re.escape(stack["tracking_uri"]) + r"/#/experiments/(\d+)/runs/(\w+)", links["train"]
    )
    assert found, links["train"]
    from airflow_provider_dltrain.registry import champion_as_of

    tracking = TrackingConfig(tracking_uri=stack["tracking_uri"])
    client = tracking.client()
    # DAY's train task trained the first model: the champion for DAY (a later day's may be live now)
    champion = client.get_model_version(MODEL, str(champion_as_of(tracking, MODEL, DAY).version))
    assert found.group(2) == champion.run_id
    assert found.group(1) == client.get_run(champion.run_id).info.experiment_id
    # the Glue console page of the job run that scored DAY: the first of the backfill's runs (one at a time)
    glue_runs = stack["aws"].client("glue").get_job_runs(JobName=SCORE_JOB)["JobRuns"]
    assert len(glue_runs) == len(DAYS), glue_runs
    glue_run = min(glue_runs, key=lambda r: r["StartedOn"])
    assert links["score"].startswith("https://us-east-1.console.aws.amazon.com/gluestudio/"), links["score"]
    assert glue_run["Id"] in links["score"] and SCORE_JOB in links["score"], links["score"]


def test_backfill_from_the_form_reruns_the_day_and_reproduces_the_nightly(page, stack, artifacts):
    from playwright.sync_api import expect

    api = stack["api"]
    before = snapshot(DAYS, stack["tracking_uri"])
    earlier = backfill_ids(api, DAG)
    page.goto(f"/dags/{DAG}")
    with shot_on_failure(page, artifacts, "backfill-form"):
        dialog = fill_backfill_form(page, DAG, DAY, DAY)
        page.screenshot(path=str(artifacts / "backfill-form.png"))
        dialog.get_by_role("button", name="Run Backfill").click()
        # On SQLite the api-server answers 503 ("Database is locked ... use PostgreSQL") while the
        # scheduler writes, sometimes after it created the backfill; the UI retries the POST, and a
        # retry then gets 409 "already a running backfill" for the one it created. Either way exactly
        # one backfill of DAY must have been created (checked below), as a user pressing the button sees.
        conflict = dialog.get_by_text(re.compile("already a running backfill"))
        deadline = time.monotonic() + 120
        while dialog.is_visible() and not conflict.is_visible() and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        if conflict.is_visible():
            page.screenshot(path=str(artifacts / "backfill-form-conflict.png"))
            dialog.get_by_role("button", name="Close").click()
        expect(dialog).to_be_hidden()

    created = the_new_backfill(api, DAG, earlier)
    assert created["reprocess_behavior"] == "completed" and created["from_date"][:10] == DAY
    runs = wait_for_backfill(api, created["id"], DAG, 1, timeout=900)
    page.goto(f"/dags/{DAG}/runs/{runs[0]['dag_run_id']}")
    page.screenshot(path=str(artifacts / "backfill-run.png"))
    assert_reran_and_reproduced(api, runs, [DAY], before, stack["tracking_uri"])
