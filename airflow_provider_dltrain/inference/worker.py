"""Executor side of batch scoring: runs inside Spark Python workers, never on the driver alone.

The model is cached in this module's globals, which live as long as the (reused) Python worker:
it is loaded once per worker and model, never once per task or per Arrow batch. Nothing here
imports Airflow; MLflow credentials arrive as environment variables of the worker process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dltrain.exceptions import SchemaMismatchError

# Driver-side switch for tests and benchmarks: each worker appends "load ..." and "batch ..."
# lines to <dir>/<pid>.log, so loads can be counted per Python worker.
LOAD_LOG_ENV = "DLTRAIN_MODEL_LOAD_LOG"
WORKER_ERROR_MARK = "DLTRAIN_WORKER_ERROR:"
# A field of what the scoring UDF returns besides the predictions: True where the model's output row
# held NaN or inf. The driver decides what that means (scoring.allow_non_finite); workers only report.
NON_FINITE = "non_finite"

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str, str], Any] = {}


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to load and run the model; shipped inside the UDF's closure."""

    model_uri: str
    tracking_uri: str
    registry_uri: str | None
    task: str
    feature_columns: tuple[str, ...]
    torch_threads: int | None = None
    load_log_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)
    # Load a model saved in pickle format (or shipping code_paths) anyway; the driver checked and warned.
    allow_pickle: bool = False
    # The model's pt2 archive as a Spark broadcast of bytes the driver downloaded and checked
    # (store.loading.fetch_pt2): workers then load it with torch alone, without MLflow.
    archive: Any = field(default=None, repr=False, compare=False)

    @property
    def cache_key(self) -> tuple[str, str, str]:
        return (self.tracking_uri, self.registry_uri or self.tracking_uri, self.model_uri)


def _log_line(cfg: WorkerConfig, line: str) -> None:
    if cfg.load_log_dir:
        with open(os.path.join(cfg.load_log_dir, f"{os.getpid()}.log"), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _threads(cfg: WorkerConfig) -> int:
    if cfg.torch_threads:
        return cfg.torch_threads
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return max(1, int(context.cpus())) if context is not None else 1
    except Exception:  # outside a Spark task (a notebook calling predict_batches directly)
        return 1


def load_model(cfg: WorkerConfig) -> Any:
    """The model of ``cfg``, loaded at most once per process (only the latest model is kept).

    With ``cfg.archive`` the driver's checked pt2 bytes are loaded by torch alone. Without it
    the model is downloaded through MLflow, and one that would run code while loading (pickle
    format, ``code_paths``) is refused here too, from the downloaded copy and by MLflow's pickle
    switch, unless ``cfg.allow_pickle``.
    """
    with _LOCK:
        model = _CACHE.get(cfg.cache_key)
        if model is not None:
            return model
        started = time.monotonic()
        import torch

        # One intra-op thread per Spark task CPU: N workers x M threads on N cores thrash.
        torch.set_num_threads(_threads(cfg))
        model = _load_archive(cfg) if cfg.archive is not None else _load_from_mlflow(cfg)
        _CACHE.clear()
        _CACHE[cfg.cache_key] = model
        _log_line(cfg, f"load {cfg.model_uri} {time.monotonic() - started:.3f}")
        return model


def _load_archive(cfg: WorkerConfig) -> Any:
    """The module of the driver-checked pt2 archive: no MLflow import, no download, no second check."""
    import io

    import torch

    return torch.export.load(io.BytesIO(cfg.archive.value)).module()


def _load_from_mlflow(cfg: WorkerConfig) -> Any:
    """Download and load through MLflow (a model only MLflow can load, or no driver-side archive)."""
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.store.loading import load_torch_model, model_label

    label = model_label(None, None, cfg.model_uri)
    tracking = TrackingConfig(tracking_uri=cfg.tracking_uri, registry_uri=cfg.registry_uri, env=dict(cfg.env))
    # Credentials only while loading: Python workers are reused and their children inherit os.environ.
    with tracking.activated():
        # The marker makes the driver raise a user error (no retries) instead of a Spark failure.
        return load_torch_model(
            cfg.model_uri, label, allow_pickle=cfg.allow_pickle, prefix=WORKER_ERROR_MARK + " "
        )


def features_matrix(columns: Sequence[Any], names: Sequence[str]) -> Any:
    """Concatenate pandas Series (scalars or arrays per row) into one float32 ``(N, F)`` matrix."""
    import numpy as np

    parts = []
    for series, name in zip(columns, names, strict=True):
        if series.isna().any():
            raise SchemaMismatchError(
                f"{WORKER_ERROR_MARK} feature column {name!r} has null values; filter or impute them first"
            )
        if series.dtype == object:
            try:
                parts.append(np.stack(series.to_numpy()).astype(np.float32, copy=False))
            except ValueError as err:
                raise SchemaMismatchError(
                    f"{WORKER_ERROR_MARK} feature column {name!r} has arrays of different lengths: {err}"
                ) from err
        else:
            parts.append(series.to_numpy(dtype=np.float32).reshape(-1, 1))
    return parts[0] if len(parts) == 1 else np.hstack([p.reshape(len(p), -1) for p in parts])


def predict(model: Any, x: Any, task: str) -> dict[str, Any]:
    """Model output for the float matrix ``x`` as columns: prediction (and score for classification),
    then ``non_finite``: whether the row's raw output held NaN or inf (its prediction means nothing)."""
    import torch

    with torch.inference_mode():
        out = model(torch.from_numpy(x))
    out = out.float()
    result = _predictions(out, task)
    result[NON_FINITE] = (~torch.isfinite(out.reshape(len(out), -1)).all(dim=1)).numpy()
    return result


def _predictions(out: Any, task: str) -> dict[str, Any]:
    import torch

    if task == "regression":
        if out.ndim > 1 and out.shape[1] != 1:
            raise SchemaMismatchError(
                f"{WORKER_ERROR_MARK} a regression model must return (N,) or (N, 1), got {tuple(out.shape)}"
            )
        return {"prediction": out.reshape(-1).double().numpy()}
    if out.ndim == 1 or out.shape[1] == 1:  # one logit: binary classification
        p = torch.sigmoid(out.reshape(-1))
        return {"prediction": (p > 0.5).long().numpy(), "score": torch.maximum(p, 1 - p).double().numpy()}
    score, label = torch.softmax(out, dim=1).max(dim=1)
    return {"prediction": label.long().numpy(), "score": score.double().numpy()}


_SHAPE_WORDS = (
    "shape",
    "size mismatch",
    "must match",
    "dimension",
    "expected input",
    "cannot be multiplied",
    "mat1",
)


def _is_shape_error(err: BaseException) -> bool:
    """Whether a model's exception says its input had the wrong shape (deterministic: no retry)."""
    if isinstance(err, (AssertionError, IndexError, TypeError, ValueError)):
        return True
    text = str(err).lower()
    return "out of memory" not in text and any(word in text for word in _SHAPE_WORDS)


def _predict_checked(model: Any, x: Any, cfg: WorkerConfig) -> dict[str, Any]:
    try:
        result = predict(model, x, cfg.task)
    except (AssertionError, IndexError, RuntimeError, TypeError, ValueError) as err:  # shape guards
        if not _is_shape_error(err):
            raise  # out of memory, a lost device...: transient, let Airflow's retries apply
        raise SchemaMismatchError(
            f"{WORKER_ERROR_MARK} model {cfg.model_uri} rejected input of shape {x.shape} built from "
            f"{list(cfg.feature_columns)}: {err}"
        ) from err
    _log_line(cfg, f"batch {len(x)}")
    return result


def predict_batches(batches: Iterator[Any], cfg: WorkerConfig) -> Iterator[Any]:
    """The scoring loop of one Spark task: load (or reuse) the model once, then one call per batch."""
    import pandas as pd

    model = None
    for batch in batches:
        # Loaded on the first batch: a task with an empty partition never pays for the model.
        model = model if model is not None else load_model(cfg)
        columns = batch if isinstance(batch, tuple) else (batch,)
        yield pd.DataFrame(_predict_checked(model, features_matrix(columns, cfg.feature_columns), cfg))


def arrow_features(batch: Any, names: Sequence[str]) -> Any:
    """The float32 ``(N, F)`` model input from Arrow columns (numbers, or equal-length arrays), no per-row objects."""
    import numpy as np

    from airflow_provider_dltrain.lake.tensors import column_to_numpy

    parts = []
    for name in names:
        try:
            values = column_to_numpy(batch.column(name), name)
        except SchemaMismatchError as err:
            raise SchemaMismatchError(f"{WORKER_ERROR_MARK} feature {err}") from err
        parts.append(values.astype(np.float32, copy=False).reshape(len(values), -1))
    return parts[0] if len(parts) == 1 else np.hstack(parts)


def predict_arrow_batches(
    batches: Iterator[Any], cfg: WorkerConfig, keys: Sequence[str], out: str
) -> Iterator[Any]:
    """``mapInArrow`` scoring loop: key columns as they came plus the prediction struct ``out``."""
    import pyarrow as pa

    model = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        model = model if model is not None else load_model(cfg)
        result = _predict_checked(model, arrow_features(batch, cfg.feature_columns), cfg)
        struct = pa.StructArray.from_arrays([pa.array(v) for v in result.values()], names=list(result))
        yield pa.RecordBatch.from_arrays([*(batch.column(k) for k in keys), struct], names=[*keys, out])
