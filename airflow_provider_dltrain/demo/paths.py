"""Where the demo keeps its state: everything under ``$DLTRAIN_HOME`` (default ``./.dltrain``)."""

from __future__ import annotations

import os


def home() -> str:
    return os.path.abspath(os.environ.get("DLTRAIN_HOME", ".dltrain"))


def landing() -> str:
    return os.path.join(home(), "landing")


def lake() -> str:
    return os.path.join(home(), "lake")


def table(name: str) -> str:
    return os.path.join(lake(), name)


def airflow_home() -> str:
    return os.path.join(home(), "airflow")


def mlflow_uri() -> str:
    return f"sqlite:///{os.path.join(home(), 'mlflow.db')}"
