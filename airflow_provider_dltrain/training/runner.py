"""``run_training``: one call from plain Python (no Airflow) to a tracked, reproducible training run."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.filters import DataFilter
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.registry.config import TrackingConfig
from airflow_provider_dltrain.training.backends import Backend, get_backend
from airflow_provider_dltrain.training.rank_job import RankJob, TrainFn
from airflow_provider_dltrain.training.rundir import local_run_dir
from airflow_provider_dltrain.training.tracked_run import (
    IDENTITY_TAGS,
    TrackedRun,
    TrainResult,
    data_cutoff,
    failure_ends_run,
    finish_tracked_run,
    load_train_fn,
    run_identity,
    start_tracked_run,
)
from airflow_provider_dltrain.utils.hashing import canonical_json

log = logging.getLogger("airflow_provider_dltrain.training")


def _run_dir(run_id: str, runner: Backend, plan: ScanPlan) -> str:
    """The backend's shared run directory when it has one, else ``$DLTRAIN_HOME/runs/<run_id>`` here."""
    shared = getattr(runner, "shared_run_dir", None)
    uri = shared(run_id, plan) if callable(shared) else None
    return str(uri) if uri else local_run_dir(run_id)


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
    run_key: str | None = None,
    aws_clients: Callable[[str], Any] | None = None,
    poll_interval: float = 30.0,
    extra_tracking: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train ``train_fn`` on exactly ``dataset``'s version and record it in MLflow.

    :param train_fn: ``train(ctx) -> dict[str, float]``, or ``"package.module:function"``.
    :param dataset: the pinned Delta version (a ``DeltaRef``, its dict or JSON).
    :param hparams: hyper-parameters; ``hparams["seed"]`` (default 0) seeds every rank.
    :param backend: ``"local"``, ``"torch_distributor"`` (options e.g. ``{"num_processes": 2}``),
        ``"horovod"``, an object, or a job elsewhere: ``"sagemaker"``, ``"ec2"``, ``"ray"`` or
        ``"kubeflow"`` (options as ``TrainModelOperator``'s ``backend_options``; the job reads the
        table with its own role).
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
    :param run_key: cloud backends: what a second call re-attaches by while the job still runs
        (default: a hash of the function, the data, its filter, ``hparams`` and the backend).
    :param aws_clients: cloud backends: ``service -> boto3 client`` (default: boto3's own chain,
        in ``backend_options["region"]`` when given).
    :param poll_interval: cloud backends: seconds between status checks of the job.
    :param extra_tracking: tracking targets beside MLflow, in-process backends only: ``{"wandb":
        {"project": ..., "entity": ..., "mode": "offline", "required": False}}`` records the run in
        W&B too (see :mod:`airflow_provider_dltrain.training.wandb_tracking`).

    Identical rows (in whatever files), code, ``hparams`` (seed included) and world size give
    bit-identical weights and metrics on CPU.
    """
    from airflow_provider_dltrain.training.finite import check_mode, check_report

    check_mode(non_finite)
    from airflow_provider_dltrain.training.remote import is_remote_backend
    from airflow_provider_dltrain.training.wandb_tracking import parse_extra_tracking

    wandb = parse_extra_tracking(extra_tracking)
    if wandb is not None and is_remote_backend(backend):
        raise InvalidSpecError(
            f"extra_tracking runs in rank 0 of the in-process backends (local, torch_distributor, horovod), "
            f"not on backend={backend!r}; drop extra_tracking or train in-process"
        )
    if is_remote_backend(backend):
        return _train_remotely(
            train_fn,
            dataset,
            hparams,
            backend=str(backend),
            backend_options=backend_options,
            data_filter=data_filter,
            tracking=tracking,
            cutoff=cutoff,
            storage_options=storage_options,
            code_version=code_version,
            early_stopping=early_stopping,
            non_finite=non_finite,
            run_key=run_key,
            aws_clients=aws_clients,
            poll_interval=poll_interval,
            run={"experiment_name": experiment_name, "run_name": run_name, "tags": dict(tags or {})},
        )
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
    if wandb is not None:
        from airflow_provider_dltrain.training.wandb_tracking import with_run_info

        mlflow = {"run_id": run_id if config else None, "experiment_id": experiment_id}
        mlflow["tracking_uri"] = config.tracking_uri if config else None
        wandb = with_run_info(wandb, all_tags, mlflow)
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
            wandb=wandb,
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


def _train_remotely(
    train_fn: TrainFn | str,
    dataset: DeltaRef | Mapping[str, Any] | str,
    hparams: Mapping[str, Any] | None,
    *,
    backend: str,
    backend_options: Mapping[str, Any] | None,
    data_filter: DataFilter | None,
    tracking: TrackingConfig | Literal[False] | None,
    cutoff: str | None,
    storage_options: StorageOptions | None,
    code_version: str | None,
    early_stopping: Mapping[str, Any] | None,
    non_finite: str,
    run_key: str | None,
    aws_clients: Callable[[str], Any] | None,
    poll_interval: float,
    run: Mapping[str, Any],
) -> TrainResult:
    """``run_training`` on a cloud backend: the launcher submits (or re-attaches to) the job and waits."""
    from airflow_provider_dltrain.training.remote import run_remote, train_fn_name

    if tracking is False:
        raise InvalidSpecError(
            f"backend={backend!r} logs the model into an MLflow run the job reaches: pass a TrackingConfig "
            "(or leave tracking unset for the default), not tracking=False"
        )
    if early_stopping:
        raise InvalidSpecError(
            f"early stopping runs on the in-process backends (local, torch_distributor, horovod), not on "
            f"backend={backend!r}"
        )
    name = train_fn_name(train_fn)
    if run_key is None:
        ref = (
            dataset
            if isinstance(dataset, str)
            else canonical_json(
                DeltaRef.coerce(dataset if isinstance(dataset, DeltaRef) else dict(dataset)).to_dict()
            )
        )
        key_of = [name, ref, canonical_json(data_filter or []), canonical_json(dict(hparams or {})), backend]
        run_key = hashlib.sha256(canonical_json(key_of).encode()).hexdigest()[:16]
    return run_remote(
        name,
        dataset,
        hparams,
        backend=backend,
        backend_options=backend_options,
        tracking=tracking or TrackingConfig(),
        run_key=run_key,
        clients=aws_clients,
        data_filter=data_filter,
        cutoff=cutoff,
        storage_options=storage_options,
        code_version=code_version,
        non_finite=non_finite,
        poll_interval=poll_interval,
        run=run,
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


__all__ = [
    "IDENTITY_TAGS",
    "TrackedRun",
    "TrainResult",
    "data_cutoff",
    "failure_ends_run",
    "finish_tracked_run",
    "load_train_fn",
    "run_identity",
    "run_training",
    "start_tracked_run",
]
