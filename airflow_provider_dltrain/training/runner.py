"""``run_training``: one call from plain Python (no Airflow) to a tracked, reproducible training run."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_provider_dltrain.lake.filters import DNF, DataFilter
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.registry.config import TrackingConfig
from airflow_provider_dltrain.training.backends import Backend, get_backend
from airflow_provider_dltrain.training.data import ScanPlan, resolve
from airflow_provider_dltrain.training.hashing import canonical_json, code_identity, params_hash
from airflow_provider_dltrain.training.rundir import local_run_dir
from airflow_provider_dltrain.training.worker import RankJob, TrainFn

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
    plan = resolve(dict(dataset) if isinstance(dataset, Mapping) else dataset, data_filter, storage_options)
    tags = _identity(load_train_fn(train_fn), plan, dict(hparams or {}), code_version)
    cut = data_cutoff(plan.data_filter, plan.partition_columns)
    if cut:
        tags["dltrain.data_cutoff"] = cut
    return tags


def _run_dir(run_id: str, runner: Backend, plan: ScanPlan) -> str:
    """The backend's shared run directory when it has one, else ``$DLTRAIN_HOME/runs/<run_id>`` here."""
    shared = getattr(runner, "shared_run_dir", None)
    uri = shared(run_id, plan) if callable(shared) else None
    return str(uri) if uri else local_run_dir(run_id)


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


def start_tracked_run(
    train_fn: TrainFn | str,
    dataset: DeltaRef | Mapping[str, Any] | str,
    hparams: Mapping[str, Any] | None,
    *,
    backend_name: str,
    world_size: int,
    data_filter: DataFilter | None = None,
    tracking: TrackingConfig | Literal[False] | None = None,
    experiment_name: str = "dltrain",
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    cutoff: str | None = None,
    storage_options: StorageOptions | None = None,
    code_version: str | None = None,
) -> TrackedRun:
    """Resolve the data and open the MLflow run with every tag and param (what :func:`run_training`
    does before any rank starts); a remote backend then hands the run to its job."""
    from airflow_provider_dltrain import __version__
    from airflow_provider_dltrain.lake.partition import check_date

    if cutoff:  # registration needs a date: refuse anything else before the data is read
        check_date(cutoff, "cutoff")
    fn = load_train_fn(train_fn)
    params = dict(hparams or {})
    plan = resolve(dict(dataset) if isinstance(dataset, Mapping) else dataset, data_filter, storage_options)
    all_tags = {
        **{k: str(v) for k, v in (tags or {}).items() if v is not None},
        "dltrain.delta_ref": plan.ref.to_json(),
        "dltrain.delta_uri": plan.ref.uri,
        "dltrain.delta_version": str(plan.ref.version),
        "dltrain.data_filter": canonical_json(plan.data_filter),
        "dltrain.provider_version": __version__,
        **_identity(fn, plan, params, code_version),
        "dltrain.backend": backend_name,
        "dltrain.world_size": str(world_size),
    }
    cut = cutoff or data_cutoff(plan.data_filter, plan.partition_columns)
    if cut:
        all_tags["dltrain.data_cutoff"] = str(cut)
    config = None if tracking is False else (tracking or TrackingConfig())
    experiment_id = None
    if config is not None:
        from airflow_provider_dltrain.training.tracking import start_run

        run_id, experiment_id = start_run(
            config,
            experiment_name=experiment_name,
            run_name=run_name,
            tags=all_tags,
            params=params,
            plan=plan,
        )
    else:
        run_id = uuid.uuid4().hex
    return TrackedRun(
        fn, plan, params, int(params.get("seed", 0)), all_tags, config, run_id, experiment_id, world_size
    )


def run_training(
    train_fn: TrainFn | str,
    dataset: DeltaRef | Mapping[str, Any] | str,
    hparams: Mapping[str, Any] | None = None,
    *,
    backend: Backend | str = "local",
    backend_options: Mapping[str, Any] | None = None,
    data_filter: DataFilter | None = None,
    tracking: TrackingConfig | Literal[False] | None = None,
    experiment_name: str = "dltrain",
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    cutoff: str | None = None,
    storage_options: StorageOptions | None = None,
    code_version: str | None = None,
    early_stopping: Mapping[str, Any] | None = None,
    non_finite: str = "fail_at_end",
) -> TrainResult:
    """Train ``train_fn`` on exactly ``dataset``'s version and record it in MLflow.

    :param train_fn: ``train(ctx) -> dict[str, float]``, or ``"package.module:function"``.
    :param dataset: the pinned Delta version (a ``DeltaRef``, its dict or JSON).
    :param hparams: hyper-parameters; ``hparams["seed"]`` (default 0) seeds every rank.
    :param backend: ``"local"``, ``"torch_distributor"`` (options e.g. ``{"num_processes": 2}``) or an object.
    :param data_filter: DNF filter such as ``[["ds", "<=", "2026-11-28"]]``.
    :param tracking: where MLflow lives (default: ``TrackingConfig()``); ``False`` records nothing
        and saves the model's ``state_dict`` under the run directory instead.
    :param tags: extra MLflow tags (the Airflow layer adds dag_id, run_id, logical date).
    :param cutoff: value of the ``dltrain.data_cutoff`` tag; default the largest ``<=`` bound on a
        partition column in ``data_filter``.
    :param code_version: names the code (a git SHA, a release) instead of hashing its source:
        ``dltrain.code_hash`` becomes sha256 of ``"code_version:" + code_version``.
    :param early_stopping: for a trial of a search, ``{"spec": {"rule": "median", "metric": ...},
        "parent_run_id": ..., "trial": name}``: the rule compares this run with the parent's other
        child runs at each logged step (see :mod:`airflow_provider_dltrain.experiments.stopping`).
    :param non_finite: a NaN or infinite metric of rank 0 fails the run (FAILED, reason in
        ``dltrain.failure``, no model logged, a user error): ``"fail_at_end"`` (default) checks the
        final values, ``"fail_at_any_step"`` every logged value; ``"allow"`` accepts them and tags the
        run ``dltrain.non_finite`` (see :mod:`airflow_provider_dltrain.training.finite`). Not part of
        the run's identity.

    Identical rows (in whatever files), code, ``hparams`` (seed included) and world size give
    bit-identical weights and metrics on CPU.
    """
    from airflow_provider_dltrain.training.finite import check_mode, check_report

    check_mode(non_finite)
    runner = get_backend(backend, backend_options)
    stopping = _check_stopping(early_stopping, tracking)
    run = start_tracked_run(
        train_fn,
        dataset,
        hparams,
        backend_name=runner.name,
        world_size=runner.world_size,
        data_filter=data_filter,
        tracking=tracking,
        experiment_name=experiment_name,
        run_name=run_name,
        tags=tags,
        cutoff=cutoff,
        storage_options=storage_options,
        code_version=code_version,
    )
    fn, plan, params, seed, config, run_id = run.fn, run.plan, run.params, run.seed, run.config, run.run_id
    experiment_id, all_tags = run.experiment_id, run.tags
    with failure_ends_run(config, run_id):
        job = RankJob(
            fn,
            plan,
            params,
            seed,
            _run_dir(run_id, runner, plan),
            config,
            run_id if config else None,
            early_stopping=stopping,
            non_finite=non_finite,
        )
        log.info(
            "training %s on %s version %s (%d files, fingerprint %s) with %s x%d; run %s",
            all_tags["dltrain.code_hash"][:12],
            plan.ref.uri,
            plan.ref.version,
            len(plan.files),
            plan.fingerprint[:12],
            runner.name,
            runner.world_size,
            run_id,
        )
        report = runner.run(job)
        check_report(report, non_finite)
        if config is not None:
            finish_tracked_run(config, run_id, report, non_finite=non_finite)
    return TrainResult(
        run_id=run_id,
        model_uri=report.get("model_uri"),
        metrics=dict(report["metrics"]),
        dataset=plan.ref,
        params=params,
        experiment_id=experiment_id,
        data_fingerprint=plan.fingerprint,
        code_hash=all_tags["dltrain.code_hash"],
        params_hash=all_tags["dltrain.params_hash"],
        world_size=runner.world_size,
        weights_sha256=report.get("weights_sha256"),
        run_dir=job.run_dir,
        trial=all_tags.get("dltrain.trial"),
        stopped=report.get("stopped"),
    )


def _check_stopping(
    early_stopping: Mapping[str, Any] | None, tracking: TrackingConfig | Literal[False] | None
) -> dict[str, Any] | None:
    """The early-stopping settings, checked before anything starts (the rule needs the tracking store)."""
    if not early_stopping:
        return None
    from airflow_provider_dltrain.exceptions import InvalidSpecError
    from airflow_provider_dltrain.experiments.stopping import StoppingSpec

    missing = [k for k in ("spec", "parent_run_id", "trial") if not early_stopping.get(k)]
    if missing or tracking is False:
        raise InvalidSpecError(
            f"early_stopping needs spec, parent_run_id and trial (missing {missing}) and an MLflow store "
            "(tracking=False has none): other trials' histories are read from it"
        )
    return {**dict(early_stopping), "spec": StoppingSpec.coerce(early_stopping["spec"]).to_dict()}


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
