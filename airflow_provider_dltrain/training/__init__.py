"""Training engine (no Airflow): one ``train(ctx)`` function, any backend, one pinned Delta version.

>>> from airflow_provider_dltrain.training import run_training
>>> result = run_training("airflow_provider_dltrain.demo.digits_model:train", ref,
...                       {"epochs": 10, "batch_size": 32}, backend="torch_distributor",
...                       backend_options={"num_processes": 2})

Nothing here imports torch, mlflow or pyspark at import time.
"""

from __future__ import annotations

from airflow_provider_dltrain.lake.filters import normalize_filter
from airflow_provider_dltrain.lake.scan_plan import DataFile, ScanPlan, fingerprint, resolve
from airflow_provider_dltrain.training.backends import (
    Backend,
    HorovodBackend,
    LocalBackend,
    TorchDistributorBackend,
    get_backend,
    register_backend,
)
from airflow_provider_dltrain.training.context import TrainContext
from airflow_provider_dltrain.training.errors import TrainingUserError
from airflow_provider_dltrain.training.horovod_backend import run_horovod_rank
from airflow_provider_dltrain.training.loader import DeltaLoader
from airflow_provider_dltrain.training.loader_spec import LoaderSpec, rank_slices, step_layout
from airflow_provider_dltrain.training.rank_job import RankJob, run_rank
from airflow_provider_dltrain.training.request import TrainingRequest
from airflow_provider_dltrain.training.runner import (
    IDENTITY_TAGS,
    TrainResult,
    data_cutoff,
    load_train_fn,
    run_identity,
    run_training,
    run_training_request,
)
from airflow_provider_dltrain.training.tracking import TAG_KEYS
from airflow_provider_dltrain.utils.hashing import code_hash, params_hash

__all__ = [
    "IDENTITY_TAGS",
    "TAG_KEYS",
    "Backend",
    "DataFile",
    "DeltaLoader",
    "HorovodBackend",
    "LoaderSpec",
    "LocalBackend",
    "RankJob",
    "ScanPlan",
    "TorchDistributorBackend",
    "TrainContext",
    "TrainResult",
    "TrainingRequest",
    "TrainingUserError",
    "code_hash",
    "data_cutoff",
    "fingerprint",
    "get_backend",
    "load_train_fn",
    "normalize_filter",
    "params_hash",
    "rank_slices",
    "register_backend",
    "resolve",
    "run_training",
    "run_training_request",
    "run_horovod_rank",
    "run_identity",
    "run_rank",
    "step_layout",
]
