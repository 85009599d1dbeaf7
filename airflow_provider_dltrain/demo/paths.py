"""Where the example DAGs keep their state, and where their Spark stages run.

Everything is under ``$DLTRAIN_HOME`` (default ``./.dltrain``) unless a deployment says otherwise:

- ``DLTRAIN_LAKE_URI``: where the tables live, e.g. ``s3://my-lake/dltrain``;
- ``DLTRAIN_ENGINE`` / ``DLTRAIN_ENGINE_OPTIONS`` (JSON): where ETL and scoring run, e.g. ``glue`` and
  ``{"staging_uri": "s3://my-lake/staging", "role": "GlueRole"}``;
- ``DLTRAIN_AWS_CONN_ID``: the Airflow ``aws`` connection for ``s3://`` tables and cloud jobs.

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


def engine_options() -> dict[str, object]:
    return _json_object("DLTRAIN_ENGINE_OPTIONS", {})


def train_backend() -> str:
    """``DLTRAIN_TRAIN_BACKEND``: where the retrain DAG trains (default 2-process DDP)."""
    return os.environ.get("DLTRAIN_TRAIN_BACKEND", "torch_distributor")


def train_backend_options() -> dict[str, object]:
    """``DLTRAIN_TRAIN_BACKEND_OPTIONS`` (JSON object); default ``{"num_processes": 2}``."""
    return _json_object("DLTRAIN_TRAIN_BACKEND_OPTIONS", {"num_processes": 2})


def _json_object(name: str, default: dict[str, object]) -> dict[str, object]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return dict(default)
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{name} is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")
    return value


def aws_conn_id() -> str | None:
    return os.environ.get("DLTRAIN_AWS_CONN_ID") or None


def airflow_home() -> str:
    return os.path.join(home(), "airflow")


def mlflow_uri() -> str:
    return f"sqlite:///{os.path.join(home(), 'mlflow.db')}"
