"""A tracked training run, whoever runs it: open it, record its result, finish or fail it.

:func:`start_tracked_run` resolves the data and opens the MLflow run with every tag and param;
:func:`finish_tracked_run` records the ranks' report; :class:`TrainResult` is what every backend
returns. ``run_training`` (in-process backends) and the remote launcher (cloud jobs) both build on
these, and neither is needed to read this.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.lake.filters import DNF, DataFilter, normalize_filter
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.scan_plan import ScanPlan, resolve
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.rank_job import TrainFn
from airflow_provider_dltrain.utils.hashing import canonical_json, code_identity, params_hash

if TYPE_CHECKING:
    from airflow_provider_dltrain.training.request import TrainingRequest

log = logging.getLogger("airflow_provider_dltrain.training")


@dataclass(frozen=True)
class TrainResult:
    """What a training run produced; ``to_dict()`` is the JSON passed on through XCom."""

    run_id: str
    model_uri: str | None
    metrics: dict[str, float]
    dataset: DeltaRef
    params: dict[str, Any]
    experiment_id: str | None = None
    data_fingerprint: str = ""
    code_hash: str = ""
    params_hash: str = ""
    world_size: int = 1
    weights_sha256: str | None = None
    run_dir: str = field(default="", compare=False)
    trial: str | None = None  # the search trial this run was, if any
    stopped: dict[str, Any] | None = None  # {step, reason} when early stopping ended the trial

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["dataset"] = self.dataset.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainResult:
        values = dict(data)
        values["dataset"] = DeltaRef.coerce(values["dataset"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in known})


def load_train_fn(train_fn: TrainFn | str) -> TrainFn:
    """The callable itself, or the function named by ``"package.module:function"``."""
    from airflow_provider_dltrain.etl.transform import load_callable

    return load_callable(train_fn, field="train_fn")


def data_cutoff(data_filter: DNF, partition_columns: tuple[str, ...]) -> str | None:
    """The largest ``<=`` bound on a partition column in the filter (the data cut-off), if any."""
    bounds = [str(v) for conj in data_filter for (c, op, v) in conj if op == "<=" and c in partition_columns]
    return max(bounds) if bounds else None


# The tags that identify a run's inputs: equal values mean the same rows, code and settings.
IDENTITY_TAGS = ("dltrain.data_fingerprint", "dltrain.code_hash", "dltrain.params_hash")


def _identity(
    fn: TrainFn, plan: ScanPlan, params: Mapping[str, Any], code_version: str | None
) -> dict[str, str]:
    """``IDENTITY_TAGS`` plus what the code hash was made of (``dltrain.code_modules``/``code_version``)."""
    return {
        "dltrain.data_fingerprint": plan.fingerprint,
        **code_identity(fn, code_version).tags(),
        "dltrain.params_hash": params_hash(params),
    }


def run_identity(
    train_fn: TrainFn | str,
    dataset: DeltaRef | Mapping[str, Any] | str,
    hparams: Mapping[str, Any] | None = None,
    data_filter: DataFilter | None = None,
    storage_options: StorageOptions | None = None,
    code_version: str | None = None,
) -> dict[str, str]:
    """The ``IDENTITY_TAGS`` a run with these inputs would get, plus ``dltrain.data_cutoff`` when derivable.

    Compare them with a registered model version's tags to skip retraining on unchanged inputs.
    Also returns ``dltrain.code_modules`` (or ``dltrain.code_version``), which explain the code hash.
    """
    from airflow_provider_dltrain.lake.scan_plan import index_fingerprint

    source = dict(dataset) if isinstance(dataset, Mapping) else dataset
    fast = index_fingerprint(source, data_filter, storage_options)
    fn = load_train_fn(train_fn)
    if fast is not None:  # the same hash resolve() computes, without listing the version's files
        fingerprint, columns = fast
        tags = {
            "dltrain.data_fingerprint": fingerprint,
            **code_identity(fn, code_version).tags(),
            "dltrain.params_hash": params_hash(dict(hparams or {})),
        }
        cut = data_cutoff(normalize_filter(data_filter), columns)
        if cut:
            tags["dltrain.data_cutoff"] = cut
        return tags
    plan = resolve(source, data_filter, storage_options)
    tags = _identity(fn, plan, dict(hparams or {}), code_version)
    cut = data_cutoff(plan.data_filter, plan.partition_columns)
    if cut:
        tags["dltrain.data_cutoff"] = cut
    return tags


@dataclass(frozen=True)
class TrackedRun:
    """A run about to train: the function, the resolved data, its tags and the open MLflow run."""

    fn: TrainFn
    plan: ScanPlan
    params: dict[str, Any]
    seed: int
    tags: dict[str, str]
    config: TrackingConfig | None
    run_id: str
    experiment_id: str | None
    world_size: int


def start_tracked_run(request: TrainingRequest, *, backend_name: str, world_size: int) -> TrackedRun:
    """Resolve the data and open the MLflow run with every tag and param (what :func:`run_training`
    does before any rank starts); a remote backend then hands the run to its job.

    ``request`` was checked when it was built (a bad ``cutoff`` never reaches the data).
    """
    from airflow_provider_dltrain.version import __version__

    fn = load_train_fn(request.train_fn)
    params = dict(request.hparams or {})
    plan = resolve(request.ref, request.data_filter, request.storage_options)
    all_tags = {
        **{k: str(v) for k, v in (request.tags or {}).items() if v is not None},
        "dltrain.delta_ref": plan.ref.to_json(),
        "dltrain.delta_uri": plan.ref.uri,
        "dltrain.delta_version": str(plan.ref.version),
        "dltrain.data_filter": canonical_json(plan.data_filter),
        "dltrain.provider_version": __version__,
        **_identity(fn, plan, params, request.code_version),
        "dltrain.backend": backend_name,
        "dltrain.world_size": str(world_size),
    }
    cut = request.cutoff or data_cutoff(plan.data_filter, plan.partition_columns)
    if cut:
        all_tags["dltrain.data_cutoff"] = str(cut)
    config = None if request.tracking is False else (request.tracking or TrackingConfig())
    experiment_id = None
    if config is not None:
        from airflow_provider_dltrain.training.tracking import start_run

        run_id, experiment_id = start_run(
            config,
            experiment_name=request.experiment_name,
            run_name=request.run_name,
            tags=all_tags,
            params=params,
            plan=plan,
        )
    else:
        run_id = uuid.uuid4().hex
    return TrackedRun(
        fn, plan, params, int(params.get("seed", 0)), all_tags, config, run_id, experiment_id, world_size
    )


@contextlib.contextmanager
def failure_ends_run(config: TrackingConfig | None, run_id: str) -> Iterator[None]:
    """Whatever fails in the block ends the MLflow run FAILED, with the reason in a tag."""
    from airflow_provider_dltrain.training.tracking import end_failed

    try:
        yield
    except BaseException as err:
        if config is not None:
            end_failed(config, run_id, err)
        raise


def finish_tracked_run(
    config: TrackingConfig, run_id: str, report: Mapping[str, Any], *, non_finite: str = "fail_at_end"
) -> None:
    """Log the final metrics rank 0 did not log, then end the run FINISHED."""
    from mlflow.entities import RunTag

    from airflow_provider_dltrain.training.finite import report_tags
    from airflow_provider_dltrain.training.tracking import finish_run

    logged = set(report.get("logged_metric_keys", []))
    unlogged = {k: v for k, v in report["metrics"].items() if k not in logged}
    tags = {"dltrain.collectives": str(report["collectives"])} if report.get("collectives") else {}
    tags.update(report_tags(report, non_finite))
    stopped = report.get("stopped")
    if stopped:
        log.info("run %s stopped early at step %s: %s", run_id, stopped["step"], stopped["reason"])
        tags.update(
            {
                "dltrain.stopped_early": "true",
                "dltrain.stopped_step": str(stopped["step"]),
                "dltrain.stop_reason": str(stopped["reason"])[:5000],
            }
        )
    if tags:
        config.client().log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    finish_run(config, run_id, failed=False, metrics=unlogged)
