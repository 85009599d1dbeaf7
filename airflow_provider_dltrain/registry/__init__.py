"""MLflow model registry engine: registration and the promotion gate, with the store's champion history
and model resolution (:mod:`airflow_provider_dltrain.store`) re-exported.

No Airflow here. Every function takes a :class:`TrackingConfig` (or an ``MlflowClient``). The gate
scores model versions with the training function's own context, so this package sits above training;
the store it shares with training and inference sits below both.
"""

from __future__ import annotations

from airflow_provider_dltrain.registry.evaluate import GateEvaluation, GateValues, load_version, rescore
from airflow_provider_dltrain.registry.promote import gate_and_promote, register_and_promote
from airflow_provider_dltrain.registry.register import register_model
from airflow_provider_dltrain.store.champion_history import champion_as_of, champion_history, settle_alias
from airflow_provider_dltrain.store.config import TrackingConfig, default_tracking_uri
from airflow_provider_dltrain.store.gate import evaluate_gate, recorded_metric
from airflow_provider_dltrain.store.models import (
    DEFAULT_ALIAS,
    GateDecision,
    GateSpec,
    ModelNotFoundError,
    ModelVersionInfo,
    PromotionResult,
    ResolvedModel,
    history_tags,
)
from airflow_provider_dltrain.store.resolve import resolve_model

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
