"""The backfills plugin's endpoints behind Airflow's auth manager (FastAPI's TestClient, no browser).

The auth manager is Airflow's simple auth manager with real JWTs; a subclass refuses the user
``outsider`` every DAG (the simple one has no per-DAG rights), which is how a user without read access
to a DAG looks to the plugin's routes.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

from airflow_provider_dltrain.backfill_views import scrubbed
from airflow_provider_dltrain.plugins.backfills import DltrainBackfillPlugin, create_app

DAG_ID = "dltrain_ingest"  # from the repository's dags/ (the tests' DAGs folder)
PLAN = f"/api/dags/{DAG_ID}/plan?start=2026-03-01&end=2026-03-02"


class NoDagForOutsider(SimpleAuthManager):
    """Airflow's simple auth manager, except that the user ``outsider`` may read no DAG."""

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):  # type: ignore[override]
        if user.get_name() == "outsider":
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )


@pytest.fixture(scope="module")
def client(airflow_db):
    from airflow.api_fastapi import app as api_app
    from airflow.configuration import conf
    from fastapi.testclient import TestClient

    saved = {
        key: conf.get(*key, fallback=None) for key in [("core", "auth_manager"), ("api_auth", "jwt_secret")]
    }
    conf.set("core", "auth_manager", f"{__name__}.NoDagForOutsider")
    conf.set("api_auth", "jwt_secret", "plugin-test-secret-" + "x" * 64)
    api_app.purge_cached_app()
    manager = api_app.create_auth_manager()
    tokens = {
        name: manager.generate_jwt(SimpleAuthManagerUser(username=name, role="viewer"))
        for name in ("viewer", "outsider")
    }
    yield TestClient(create_app()), tokens
    api_app.purge_cached_app()
    for (section, key), value in saved.items():
        if value is not None:
            conf.set(section, key, value)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "path",
    [
        "/",
        PLAN,
        f"/api/dags/{DAG_ID}/verdicts?start=2026-03-01&end=2026-03-02",
        f"/api/dags/{DAG_ID}/dates/2026-03-01",
    ],
)
def test_every_route_answers_401_without_a_token(client, path):
    app, _ = client
    assert app.get(path).status_code == 401


def test_a_user_the_auth_manager_refuses_the_dag_gets_403_and_no_plan(client):
    app, tokens = client
    response = app.get(PLAN, headers=_bearer(tokens["outsider"]))
    assert response.status_code == 403 and "dates" not in response.text


def test_a_reader_of_the_dag_gets_its_plan_and_verdicts_as_json(client):
    app, tokens = client
    plan = app.get(PLAN, headers=_bearer(tokens["viewer"]))
    assert plan.status_code == 200, plan.text
    body = plan.json()
    assert [d["ds"] for d in body["dates"]] == ["2026-03-01", "2026-03-02"]
    # nothing landed for these dates in the test home: the ingest cannot establish its facts, so it computes
    assert {d["verdict"] for d in body["dates"]} == {"will recompute"}
    assert body["dates"][0]["tasks"][0]["task_id"] == "ingest_images"
    assert body["totals"]["spark_stages"] == 2
    grid = app.get(
        f"/api/dags/{DAG_ID}/verdicts?start=2026-03-01&end=2026-03-01", headers=_bearer(tokens["viewer"])
    )
    assert grid.status_code == 200 and grid.json()["dates"][0]["verdict"] == "no run"


def test_the_page_opens_with_the_ui_cookie(client):
    app, tokens = client
    app.cookies.set("_token", tokens["viewer"])
    try:
        page = app.get("/")
    finally:
        app.cookies.clear()
    assert page.status_code == 200 and "<h1>Backfills</h1>" in page.text


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("start=2026-03-02&end=2026-03-01", "is before start"),
        ("start=2026-13-01&end=2026-03-01", "start: "),
        ("start=2025-01-01&end=2026-03-01", "more than 400 dates"),
        ("start=2026-03-01&end=2026-03-01&conf=[1]", "conf: expected a JSON object"),
    ],
)
def test_a_bad_range_is_refused_naming_the_field(client, query, says):
    app, tokens = client
    response = app.get(f"/api/dags/{DAG_ID}/plan?{query}", headers=_bearer(tokens["viewer"]))
    assert response.status_code == 422 and says in response.json()["detail"]


def test_responses_carry_no_credentials():
    got = scrubbed(
        {"uri": "s3://key:secret@bucket/t", "password": "p", "nested": [{"aws_secret_access_key": "k"}]}
    )
    assert got == {"uri": "s3://bucket/t", "password": "***", "nested": [{"aws_secret_access_key": "***"}]}
    assert scrubbed("http://user:pw@mlflow:5000/#/runs/1") == "http://mlflow:5000/#/runs/1"


def test_installing_the_package_registers_the_plugin_with_airflow():
    (found,) = [e for e in entry_points(group="airflow.plugins") if e.name == "dltrain_backfills"]
    assert found.load() is DltrainBackfillPlugin
    plugin = DltrainBackfillPlugin()
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/dltrain/backfills"
    assert {v["destination"] for v in plugin.external_views} == {"dag", "nav"}
