"""MLflow model registry engine: registration, promotion gate, champion history, model resolution.

No Airflow here. Every function takes a :class:`TrackingConfig` (or an ``MlflowClient``).
"""

from __future__ import annotations

from airflow_provider_dltrain.registry.champion_history import champion_as_of, champion_history, settle_alias
from airflow_provider_dltrain.registry.config import TrackingConfig, default_tracking_uri
from airflow_provider_dltrain.registry.evaluate import GateEvaluation, GateValues, load_version, rescore
from airflow_provider_dltrain.registry.gate import evaluate_gate, recorded_metric
from airflow_provider_dltrain.registry.models import (
    DEFAULT_ALIAS,
    GateDecision,
    GateSpec,
    ModelNotFoundError,
    ModelVersionInfo,
    PromotionResult,
    ResolvedModel,
    history_tags,
)
from airflow_provider_dltrain.registry.promote import gate_and_promote, register_and_promote
from airflow_provider_dltrain.registry.register import register_model
from airflow_provider_dltrain.registry.resolve import resolve_model

__all__ = [
    "DEFAULT_ALIAS",
    "GateDecision",
    "GateEvaluation",
    "GateSpec",
    "GateValues",
    "ModelNotFoundError",
    "ModelVersionInfo",
    "PromotionResult",
    "ResolvedModel",
    "TrackingConfig",
    "champion_as_of",
    "champion_history",
    "default_tracking_uri",
    "evaluate_gate",
    "gate_and_promote",
    "history_tags",
    "load_version",
    "recorded_metric",
    "register_and_promote",
    "register_model",
    "rescore",
    "resolve_model",
    "settle_alias",
]
