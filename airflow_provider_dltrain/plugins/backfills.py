"""The backfills plugin: the plan before a backfill and the verdict per date after it, in the Airflow UI.

A FastAPI app mounted by Airflow's API server under ``/dltrain/backfills`` (``fastapi_apps``) and a
page linked from the navigation and from each DAG's page (``external_views``). Every route goes
through Airflow's auth manager as the Airflow API's own routes do (a JWT as ``Authorization: Bearer``
or the UI's ``_token`` cookie): no token is 401; a user the auth manager does not let read the DAG's
runs is 403. Installing the package registers it (entry point ``airflow.plugins``); the API server
loads it when it starts.

Routes (``start``/``end`` are dates ``YYYY-MM-DD``, at most 400 dates apart):

- ``GET /dltrain/backfills/`` — the page (plan and grid, plain HTML and JS);
- ``GET /dltrain/backfills/api/dags/{dag_id}/plan?start=&end=[&conf=JSON]`` — the plan
  (:func:`~airflow_provider_dltrain.backfill_plan.plan_backfill`; ``conf``: the backfill's run configuration);
- ``GET /dltrain/backfills/api/dags/{dag_id}/verdicts?start=&end=`` — the verdict grid;
- ``GET /dltrain/backfills/api/dags/{dag_id}/dates/{ds}`` — one date: changes, plan, lineage, links.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/dltrain/backfills"


@cache
def create_app() -> Any:
    """The plugin's FastAPI app; each route depends on Airflow's auth manager (see the module)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag, requires_authenticated
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse

    from airflow_provider_dltrain import backfill_views as views
    from airflow_provider_dltrain.exceptions import DltrainUserError
    from airflow_provider_dltrain.plugins.backfills_page import PAGE

    app = FastAPI(title="dltrain backfills", docs_url=None, redoc_url=None, openapi_url=None)
    read_runs = [Depends(requires_access_dag("GET", DagAccessEntity.RUN))]

    def answer(build: Any) -> Any:
        try:
            return build()
        except DltrainUserError as err:  # a bad range or an unknown DAG: say which, never retry
            raise HTTPException(status_code=422, detail=str(err)) from err

    @app.get("/", response_class=HTMLResponse, dependencies=[Depends(requires_authenticated())])
    def page() -> str:
        return PAGE

    @app.get("/api/dags/{dag_id}/plan", dependencies=read_runs)
    def plan(dag_id: str, start: str, end: str, conf: str | None = None) -> Any:
        return answer(
            lambda: views.plan_view(dag_id, *views.date_range(start, end), conf=views.run_conf(conf))
        )

    @app.get("/api/dags/{dag_id}/verdicts", dependencies=read_runs)
    def verdicts(dag_id: str, start: str, end: str) -> Any:
        return answer(lambda: views.verdicts_view(dag_id, *views.date_range(start, end)))

    @app.get("/api/dags/{dag_id}/dates/{ds}", dependencies=read_runs)
    def one_date(dag_id: str, ds: str) -> Any:
        return answer(lambda: views.date_view(dag_id, ds))

    return app


class DltrainBackfillPlugin(AirflowPlugin):
    """Registers the app and the page; the app is built when the API server loads plugins."""

    name = "dltrain_backfills"
    external_views = [
        {"name": "Backfill plan", "href": f"{URL_PREFIX}/?dag_id={{DAG_ID}}", "destination": "dag"},
        {"name": "dltrain backfills", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse"},
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "dltrain backfills"}]
