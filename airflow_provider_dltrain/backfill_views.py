"""What the backfills page and its JSON endpoints show: the plan, the verdict grid, one date in full.

Built from :func:`~airflow_provider_dltrain.backfill_plan.plan_backfill` (before a backfill) and
:func:`~airflow_provider_dltrain.backfill_report.backfill_report` (after it), plus the lineage of
the date's predictions and links to the MLflow run, the table and the job consoles. Every string a
response carries passes :func:`scrubbed` first: no ``user:password@`` of a URI and no value of a key
that names a secret reaches the browser, as the Airflow UI hides them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

#: The longest range one request plans or reports (the default backfill horizon).
MAX_DAYS = 400
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_SECRET_KEY = re.compile(
    r"(secret|password|passwd|token|credential|session|private|api_?key|access_?key)", re.I
)


def date_range(start: str, end: str) -> tuple[date, date]:
    """``start``/``end`` as dates, refused naming the field when malformed, reversed or too long."""
    days = []
    for name, value in (("start", start), ("end", end)):
        try:
            days.append(date.fromisoformat(value))
        except (TypeError, ValueError) as err:
            raise InvalidSpecError(f"{name}: {value!r} is not a date YYYY-MM-DD") from err
    first, last = days
    if last < first:
        raise InvalidSpecError(f"end {last} is before start {first}: give the first date first")
    if (last - first).days + 1 > MAX_DAYS:
        raise InvalidSpecError(f"{start} to {end} is more than {MAX_DAYS} dates: ask for a shorter range")
    return first, last


def run_conf(text: str | None) -> dict[str, Any] | None:
    """The backfill's run configuration from its JSON text (an object), refused naming ``conf``."""
    import json

    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as err:
        raise InvalidSpecError(f"conf: not JSON ({err})") from err
    if not isinstance(value, dict):
        raise InvalidSpecError(f"conf: expected a JSON object of params, got {type(value).__name__}")
    return value


def scrubbed(value: Any) -> Any:
    """``value`` with every URI's userinfo removed and every secret-named key's value masked."""
    if isinstance(value, str):
        return _USERINFO.sub(r"\g<scheme>", value)
    if isinstance(value, Mapping):
        return {str(k): "***" if _SECRET_KEY.search(str(k)) else scrubbed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrubbed(v) for v in value]
    return value


_PARSED: dict[str, tuple[int | None, Any]] = {}  # DAG file -> (its mtime, its DagBag)


def load_dag(dag_id: str) -> Any:
    """The DAG as its file defines it (real operators, whose methods the plan decides with).

    The file is the one Airflow's metadata database records for ``dag_id`` (else the DAGs folder).
    """
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3.2+
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef,attr-defined,unused-ignore]

    with create_session() as session:
        model = session.get(DagModel, dag_id)
        where = model.fileloc if model is not None and model.fileloc else None
    if where is None:
        bag = DagBag()
    else:  # parsed again only when the file changed: a page asks for the same DAG over and over
        stamp = os.stat(where).st_mtime_ns if os.path.exists(where) else None
        kept = _PARSED.get(where)
        bag = kept[1] if kept is not None and kept[0] == stamp else DagBag(dag_folder=where, safe_mode=False)
        _PARSED[where] = (stamp, bag)
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "; ".join(f"{k}: {v}" for k, v in bag.import_errors.items())
        raise InvalidSpecError(
            f"DAG {dag_id!r} not found in {where or 'the DAGs folder'}{': ' + errors if errors else ''}"
        )
    return dag


def plan_view(
    dag_id: str, start: date, end: date, *, conf: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The plan of ``dag_id`` for [start, end] as JSON (the dates' newest runs read from Airflow)."""
    from airflow_provider_dltrain.backfill_plan import plan_backfill
    from airflow_provider_dltrain.backfill_runs import run_outcomes

    plan = plan_backfill(load_dag(dag_id), start, end, runs=run_outcomes(dag_id, start, end), conf=conf)
    return scrubbed(plan.to_dict())


def stores(tracking: Any = None) -> tuple[Any, dict[str, str] | None]:
    """Where the report reads MLflow and the tables in this process, as the DAGs' tasks do: the
    ``mlflow_default`` connection (else ``MLFLOW_TRACKING_URI``, else the embedded store), and the
    ``aws`` connection ``DLTRAIN_AWS_CONN_ID`` names (else ``aws_default`` when it is defined)."""
    from airflow_provider_dltrain.commands.connections import aws_storage_options, get_connection
    from airflow_provider_dltrain.store.config import TrackingConfig, tracking_config_from

    if tracking is None:
        conn = get_connection("mlflow_default")
        tracking = tracking_config_from(conn) if conn is not None else TrackingConfig()
    conn_id = os.environ.get("DLTRAIN_AWS_CONN_ID") or "aws_default"
    options = aws_storage_options(conn_id) if get_connection(conn_id) is not None else None
    return tracking, options or None


def verdicts_view(dag_id: str, start: date, end: date, tracking: Any = None) -> dict[str, Any]:
    """The verdict grid: per date what its newest run did (reproduced, changed, ...)."""
    from airflow_provider_dltrain.backfill_report import backfill_report

    tracking, options = stores(tracking)
    reports = backfill_report(dag_id, start, end, tracking, storage_options=options)
    counts: dict[str, int] = {}
    for report in reports:
        counts[report.verdict] = counts.get(report.verdict, 0) + 1
    return scrubbed({"dag_id": dag_id, "dates": [r.to_dict() for r in reports], "totals": counts})


def date_view(dag_id: str, ds: str, tracking: Any = None) -> dict[str, Any]:
    """One date in full: its verdict and changes, its plan, the lineage of what it scored, links."""
    from airflow_provider_dltrain.backfill_report import backfill_report

    day, _ = date_range(ds, ds)
    tracking, options = stores(tracking)
    (report,) = backfill_report(dag_id, day, day, tracking, storage_options=options)
    plan = plan_view(dag_id, day, day)["dates"][0]
    out: dict[str, Any] = {"report": report.to_dict(), "plan": plan, "lineage": None, "links": []}
    newest = _newest_run(dag_id, day)
    scored = _scored_ref(newest, [t["task_id"] for t in plan["tasks"] if t["stage"] == "score"])
    if scored is not None:
        out["lineage"] = _lineage(scored, tracking, options)
        out["links"] = _links(out["lineage"], tracking)
    for task_id, job in sorted((newest.get("jobs") or {}).items()):
        if isinstance(job, dict) and job.get("console_url"):
            out["links"].append({"name": f"{task_id}: job console", "url": str(job["console_url"])})
    return scrubbed(out)


def _newest_run(dag_id: str, day: date) -> dict[str, Any]:
    from airflow_provider_dltrain.backfill_runs import run_outcomes

    runs = run_outcomes(dag_id, day, day).get(day.isoformat()) or []
    return runs[-1] if runs else {}


def _scored_ref(run: Mapping[str, Any], score_tasks: list[str]) -> dict[str, Any] | None:
    """The predictions version the date's newest run returned: what its scoring task returned (a
    ``SparkBatchInferenceOperator`` returns the table version it wrote or handed back)."""
    xcom = run.get("xcom") or {}
    for task_id in score_tasks:
        value = xcom.get(task_id)
        if (
            isinstance(value, dict)
            and isinstance(value.get("uri"), str)
            and isinstance(value.get("version"), int)
        ):
            return value
    return None


def _lineage(
    ref: Mapping[str, Any], tracking: Any, options: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """prediction → model → MLflow run → Delta version, as ``dltrain lineage`` gives it (the tables read
    with the DAGs' ``aws`` connection, as the verdicts are)."""
    from airflow_provider_dltrain.lineage import lineage

    try:
        chain = lineage(
            str(ref["uri"]),
            int(ref["version"]),
            tracking=tracking,
            storage_options=dict(options or {}) or None,
        )
    except Exception as err:  # the grid still shows the verdict: say why the chain is missing
        return {"error": f"{type(err).__name__}: {err}"}
    model = chain.get("model") or {}
    return {
        "prediction": chain.get("prediction"),
        "model": {k: model.get(k) for k in ("name", "version", "gate", "champion_from", "data_cutoff")},
        "run": model.get("run"),
        "training_data": model.get("training_data"),
        "training_commit": chain.get("training_commit"),
        "changed_since_training": chain.get("changed_since_training") or [],
    }


def _links(chain: Mapping[str, Any] | None, tracking: Any) -> list[dict[str, str]]:
    """The MLflow run page (an MLflow server only) and the S3 console of each table the chain names."""
    from airflow_provider_dltrain.store.config import mlflow_run_url

    if not chain or "error" in chain:
        return []
    links = []
    run = chain.get("run") or {}
    url = mlflow_run_url(str(tracking.tracking_uri), run.get("experiment_id"), str(run.get("run_id") or ""))
    if url:
        links.append({"name": "MLflow run", "url": url})
    for what in ("prediction", "training_data"):
        uri = str((chain.get(what) or {}).get("uri") or "")
        if uri.startswith("s3://"):
            bucket, _, key = uri[5:].partition("/")
            url = f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={key.rstrip('/')}/"
            links.append({"name": f"{what.replace('_', ' ')} table", "url": url})
    return links
