"""Batch inference with Spark pandas UDFs (no Airflow): a pinned MLflow model over a pinned Delta version.

``score_table`` reads one ``DeltaRef`` (optionally one partition of it), scores it with a model
loaded once per Spark Python worker and replaces one partition of the output table in one commit.
"""

from __future__ import annotations

from airflow_provider_dltrain.inference.model import ScoringModel, check_model_spec, resolve_scoring_model
from airflow_provider_dltrain.inference.score_spec import ScoringSpec
from airflow_provider_dltrain.inference.scoring import read_input, score_dataframe, score_table
from airflow_provider_dltrain.inference.worker import LOAD_LOG_ENV, WorkerConfig

__all__ = [
    "LOAD_LOG_ENV",
    "ScoringModel",
    "ScoringSpec",
    "WorkerConfig",
    "check_model_spec",
    "read_input",
    "resolve_scoring_model",
    "score_dataframe",
    "score_table",
]
