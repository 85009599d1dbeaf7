"""Spark ETL into Delta tables (no Airflow): sessions, inputs, the transform contract and the writer."""

from __future__ import annotations

from airflow_provider_dltrain.etl.inputs import read_delta, read_input, read_inputs
from airflow_provider_dltrain.etl.spark import spark_session
from airflow_provider_dltrain.etl.transform import load_callable, require_columns, run_transform
from airflow_provider_dltrain.etl.writer import WriteResult, default_quarantine_uri, write_dataframe

__all__ = [
    "WriteResult",
    "default_quarantine_uri",
    "load_callable",
    "read_delta",
    "read_input",
    "read_inputs",
    "require_columns",
    "run_transform",
    "spark_session",
    "write_dataframe",
]
