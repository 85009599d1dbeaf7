"""Operators. Importing this package loads no Spark, deltalake, torch or MLflow."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SparkToDeltaOperator": "airflow_provider_dltrain.operators.spark",
    "DeltaWriteOptions": "airflow_provider_dltrain.operators.spark",
    "TrainModelOperator": "airflow_provider_dltrain.operators.training",
    "ExpandTrialsOperator": "airflow_provider_dltrain.operators.experiments",
    "SelectBestTrialOperator": "airflow_provider_dltrain.operators.experiments",
    "RegisterModelOperator": "airflow_provider_dltrain.operators.registry",
    "SparkBatchInferenceOperator": "airflow_provider_dltrain.operators.inference",
    "DeltaLineageOperator": "airflow_provider_dltrain.operators.lineage",
    "DltrainReapOperator": "airflow_provider_dltrain.operators.reaper",
    "Ec2ClusterTeardownOperator": "airflow_provider_dltrain.operators.ec2",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
