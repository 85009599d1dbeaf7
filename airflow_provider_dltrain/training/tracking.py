"""MLflow bookkeeping of a training run: the launcher opens and closes the run, rank 0 fills it.

The launching process creates the run (tags, params, the Delta dataset input) before any worker
starts, so a crash still leaves a FAILED run that names its data. Rank 0 then logs per-epoch metrics
and the model; other ranks never talk to MLflow.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, require
from airflow_provider_dltrain.store.config import TrackingConfig, ensure_experiment

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.scan_plan import ScanPlan

log = logging.getLogger(__name__)

MODEL_NAME = "model"
# The only format we log: a torch.export archive loads without unpickling code (pickle would not).
SERIALIZATION_FORMAT = "pt2"
TAG_KEYS = (
    "dltrain.dag_id",
    "dltrain.run_id",
    "dltrain.logical_date",
    "dltrain.data_cutoff",
    "dltrain.delta_ref",
    "dltrain.delta_uri",
    "dltrain.delta_version",
    "dltrain.provider_version",
    "dltrain.code_hash",
    "dltrain.params_hash",
    "dltrain.data_fingerprint",
)
_MAX_PARAM = 6000
_MAX_TAG = 5000
FAILURE_TAG = "dltrain.failure"


def flatten_params(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """MLflow params from (nested) hyper-parameters: ``{"opt": {"lr": 0.1}}`` -> ``{"opt.lr": "0.1"}``."""
    out: dict[str, str] = {}
    for key, value in hparams.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_params(value, f"{name}."))
        else:
            out[name] = str(value)[:_MAX_PARAM]
    return out


def start_run(
    config: TrackingConfig,
    *,
    experiment_name: str,
    run_name: str | None,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
    plan: ScanPlan,
) -> tuple[str, str]:
    """Create the run with its tags, params and Delta dataset input; return ``(run_id, experiment_id)``.

    Once the run exists, any failure ends it FAILED with the reason in ``dltrain.failure``; params
    MLflow refuses (a bad key, a value too long) raise :class:`InvalidSpecError`.
    """
    require("mlflow", "mlflow")
    client = config.client()
    experiment_id = ensure_experiment(client, experiment_name, config.tracking_uri)
    run_id = client.create_run(experiment_id, tags=dict(tags), run_name=run_name).info.run_id
    try:
        _fill_run(client, run_id, params, plan)
    except BaseException as err:
        end_failed(config, run_id, err)
        raise
    return run_id, experiment_id


def _fill_run(client: Any, run_id: str, params: Mapping[str, Any], plan: ScanPlan) -> None:
    from mlflow.entities import DatasetInput, InputTag, Param
    from mlflow.exceptions import MlflowException

    flat = flatten_params(params)
    if flat:
        try:
            client.log_batch(run_id, params=[Param(k, v) for k, v in sorted(flat.items())])
        except MlflowException as err:
            if err.error_code != "INVALID_PARAMETER_VALUE":
                raise
            raise InvalidSpecError(
                f"MLflow refused the hyper-parameters of run {run_id} ({err.message}); rename or "
                "shorten the offending hparams key or value."
            ) from err
    client.log_inputs(
        run_id,
        datasets=[
            DatasetInput(_dataset(plan)._to_mlflow_entity(), [InputTag("mlflow.data.context", "training")])
        ],
    )


def _dataset(plan: ScanPlan) -> Any:
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    source = DeltaDatasetSource(path=plan.ref.uri, delta_table_version=plan.ref.version)
    name = os.path.basename(plan.ref.uri.rstrip("/")) or plan.ref.uri
    return MetaDataset(source, name=name, digest=plan.fingerprint[:16])  # type: ignore[abstract]


def finish_run(
    config: TrackingConfig, run_id: str, *, failed: bool, metrics: Mapping[str, float] | None = None
) -> None:
    """Log final metrics not logged during training, then mark the run FINISHED or FAILED."""
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    client = config.client()
    if metrics:
        now = int(time.time() * 1000)
        try:
            client.log_batch(
                run_id, metrics=[Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())]
            )
        except MlflowException as err:
            if err.error_code != "INVALID_PARAMETER_VALUE":
                raise
            # the training function's metric names: a user error, as refused hyper-parameters are
            raise InvalidSpecError(
                f"MLflow refused the final metrics of run {run_id} ({err.message}); rename the offending "
                f"metric among {sorted(metrics)} in what the training function returns or logs."
            ) from err
    client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")


def failure_reason(config: TrackingConfig, err: BaseException) -> str:
    """What a failed run's ``dltrain.failure`` tag says: the error's type and first lines, no secrets."""
    text = f"{type(err).__name__}: {err}".strip()
    lines = text.splitlines()
    short = "\n".join(lines[:20]) + ("\n..." if len(lines) > 20 else "")
    return config.scrub(short)[:_MAX_TAG]


KILLED = "the task was killed; the training job was stopped"  # the reason a killed task's run ends with


def end_failed(config: TrackingConfig, run_id: str, err: BaseException) -> None:
    """Mark ``run_id`` FAILED with ``dltrain.failure`` saying why; never hides ``err`` behind its own error."""
    try:
        client = config.client()
        client.set_tag(run_id, FAILURE_TAG, failure_reason(config, err))
        client.set_terminated(run_id, status="FAILED")
    except Exception as mark_err:  # the store may be what failed: report the original error
        log.warning(
            "could not mark MLflow run %s FAILED: %s",
            run_id,
            config.scrub(f"{type(mark_err).__name__}: {mark_err}"),
        )


class RankTracker:
    """What rank 0 records: metrics per step and the model. Base class: no MLflow, model saved to disk."""

    def __init__(self, checkpoint_dir: str, published_dir: str | None = None) -> None:
        """:param published_dir: where ``checkpoint_dir``'s files end up when it is a scratch copy
        (a run directory on shared storage); the model path returned names that place.
        """
        self.checkpoint_dir = checkpoint_dir
        self.published_dir = published_dir
        self.logged_keys: set[str] = set()
        self.saved_paths: list[str] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int | None) -> None:
        self.logged_keys.update(metrics)

    def log_model(self, model: Any, input_example: Any, name: str = MODEL_NAME) -> str:
        """Save the model's ``state_dict`` under the checkpoint directory; return its (published) path."""
        import torch

        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = os.path.join(self.checkpoint_dir, f"{name}.pt")
        torch.save(model.state_dict(), path)
        self.saved_paths.append(path)
        return f"{self.published_dir.rstrip('/')}/{name}.pt" if self.published_dir else path

    def discard_model(self, model_uri: str) -> None:
        """Take back a model saved before the run failed (its final metrics were not finite)."""
        for path in self.saved_paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self.saved_paths.clear()

    def close(self, metrics: Mapping[str, float], error: BaseException | None) -> None:
        """The rank is done (``error`` when training failed); trackers of other systems end their run here."""


class MlflowRankTracker(RankTracker):
    """Rank 0's writer into an existing MLflow run (created by the launcher)."""

    def __init__(self, checkpoint_dir: str, config: TrackingConfig, run_id: str) -> None:
        super().__init__(checkpoint_dir)
        self.config, self.run_id = config, run_id
        self._client: Any = None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None) -> None:
        from mlflow.entities import Metric

        if self._client is None:
            self._client = self.config.client()
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, int(step or 0)) for k, v in metrics.items()]
        self._client.log_batch(self.run_id, metrics=batch)
        super().log_metrics(metrics, step)

    def log_model(self, model: Any, input_example: Any, name: str = MODEL_NAME) -> str:
        """Log the PyTorch flavour (``pt2`` export, signature and input example); return its model URI.

        Only ``pt2`` is logged (checked after logging): a pickled model would run code when loaded.
        """
        import mlflow
        import numpy as np
        import torch
        from mlflow.models import infer_signature

        if input_example is None:
            raise InvalidSpecError(
                "save_model needs an input_example (a few rows of the model input), or a loader batch "
                "with a floating-point column seen before the call"
            )
        example = (
            input_example.detach().cpu()
            if isinstance(input_example, torch.Tensor)
            else torch.as_tensor(input_example)
        )
        if example.shape[0] < 2:
            raise InvalidSpecError(
                "input_example needs at least 2 rows so the exported model keeps a dynamic batch size"
            )
        model = copy.deepcopy(model).cpu().eval()  # the caller's model keeps its device and mode
        with torch.no_grad():
            output = model(example)
        signature = infer_signature(example.numpy(), np.asarray(output.detach().cpu().numpy()))
        # The fluent API needs a process-wide store and credentials: ours for this call only, then
        # the caller's back exactly. The run names its experiment, so a caller's active experiment
        # (set_experiment, MLFLOW_EXPERIMENT_*) from another store must not make start_run refuse it.
        import mlflow.tracking.fluent as fluent

        saved_experiment = getattr(fluent, "_active_experiment_id", None)
        fluent._active_experiment_id = None
        try:
            with (
                self.config.activated(MLFLOW_EXPERIMENT_ID=None, MLFLOW_EXPERIMENT_NAME=None),
                mlflow.start_run(run_id=self.run_id, nested=mlflow.active_run() is not None),
            ):
                info = mlflow.pytorch.log_model(
                    model,
                    name=name,
                    signature=signature,
                    input_example=example.numpy(),
                    pip_requirements=mlflow.pytorch.get_default_pip_requirements(),
                    # Explicit: MLflow's default is pickle on Databricks.
                    serialization_format=SERIALIZATION_FORMAT,
                )
        finally:
            fluent._active_experiment_id = saved_experiment
        self._require_pt2(str(info.model_uri))
        return str(info.model_uri)

    def discard_model(self, model_uri: str) -> None:
        """Delete the logged model ``models:/m-<id>`` (best effort: the run's failure is what matters)."""
        if not model_uri.startswith("models:/m-"):
            log.warning(
                "run %s failed after logging %s, which stays in its artifacts", self.run_id, model_uri
            )
            return
        try:
            self.config.client().delete_logged_model(model_uri[len("models:/") :].split("/", 1)[0])
        except Exception as err:
            log.warning("could not delete %s of failed run %s: %s", model_uri, self.run_id, err)

    def _require_pt2(self, model_uri: str) -> None:
        """Refuse to hand on a model that was not stored as a pt2 export (it would need pickle to load)."""
        from airflow_provider_dltrain.exceptions import UnsafeModelError
        from airflow_provider_dltrain.store.loading import PT2, inspect_uri

        fmt = inspect_uri(model_uri, self.config)
        if fmt.serialization != PT2 or fmt.code is not None:
            raise UnsafeModelError(
                f"the model logged as {model_uri} in run {self.run_id} is not a plain {PT2} export "
                f"({fmt.evidence}, code {fmt.code!r}); dltrain logs pt2 only. Check the installed MLflow "
                "honours serialization_format='pt2'."
            )
