"""Where the example DAGs keep their state, and where their Spark stages run.

Everything is under ``$DLTRAIN_HOME`` (default ``./.dltrain``) unless a deployment says otherwise:

- ``DLTRAIN_LAKE_URI``: where the tables live, e.g. ``s3://my-lake/dltrain``;
- ``DLTRAIN_ENGINE`` / ``DLTRAIN_ENGINE_OPTIONS`` (JSON): where ETL and scoring run, e.g. ``glue`` and
  ``{"staging_uri": "s3://my-lake/staging", "role": "GlueRole"}``;
- ``DLTRAIN_AWS_CONN_ID``: the Airflow ``aws`` connection for ``s3://`` tables and cloud jobs;
- ``DLTRAIN_TRAIN_BACKEND`` / ``DLTRAIN_TRAIN_BACKEND_OPTIONS`` (JSON): where training runs, e.g.
  ``sagemaker`` and ``{"staging_uri": "s3://my-lake/staging", "role": "arn:aws:iam::…:role/…"}``
  (default: ``ddp`` with 2 processes on the Airflow worker);
- ``DLTRAIN_POLL_INTERVAL``: seconds between status checks of the cloud jobs (ETL, training,
  scoring) and of the partition sensor (default: each operator's own, 15 to 60 s).

The DAG files read them when they are parsed: the same unmodified DAGs run on a laptop and on AWS.
"""

from __future__ import annotations

import json
import os


def home() -> str:
    return os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))


def landing() -> str:
    return os.path.join(home(), "landing")


def lake() -> str:
    return os.environ.get("DLTRAIN_LAKE_URI", "").rstrip("/") or os.path.join(home(), "lake")


def table(name: str) -> str:
    root = lake()
    return f"{root}/{name}" if "://" in root else os.path.join(root, name)


def asset_uri(table_uri: str) -> str:
    """An Airflow Asset URI for a table: ``s3://…`` as it is, a local path as ``file://``."""
    return table_uri if "://" in table_uri else f"file://{table_uri}"


def engine() -> str:
    return os.environ.get("DLTRAIN_ENGINE", "local")


def _json_options(name: str) -> dict[str, object]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{name} is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")
    return value


def engine_options() -> dict[str, object]:
    return _json_options("DLTRAIN_ENGINE_OPTIONS")


def train_backend() -> str:
    return os.environ.get("DLTRAIN_TRAIN_BACKEND", "").strip() or "ddp"


def train_backend_options() -> dict[str, object]:
    options = _json_options("DLTRAIN_TRAIN_BACKEND_OPTIONS")
    if not options and train_backend() in ("ddp", "torch_distributor"):
        return {"num_processes": 2}
    return options


def poll_intervals(**defaults: float) -> dict[str, float]:
    """Each task's poll interval: ``$DLTRAIN_POLL_INTERVAL`` for all of them when set, else ``defaults``.

    A short interval suits an emulator or a demo, where a job ends in seconds; on AWS a job takes minutes
    and each check is an API call, so the operators' defaults apply.
    """
    raw = os.environ.get("DLTRAIN_POLL_INTERVAL", "").strip()
    if not raw:
        return dict(defaults)
    try:
        seconds = float(raw)
    except ValueError as err:
        raise ValueError(f"DLTRAIN_POLL_INTERVAL must be a number of seconds, got {raw!r}") from err
    if not seconds > 0:
        raise ValueError(f"DLTRAIN_POLL_INTERVAL must be more than 0 seconds, got {raw!r}")
    return {task: seconds for task in defaults}


def aws_conn_id() -> str | None:
    return os.environ.get("DLTRAIN_AWS_CONN_ID") or None


def airflow_home() -> str:
    return os.path.join(home(), "airflow")


def mlflow_uri() -> str:
    return f"sqlite:///{os.path.join(home(), 'mlflow.db')}"
