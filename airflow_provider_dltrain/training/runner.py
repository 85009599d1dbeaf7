"""``run_training``: one call from plain Python (no Airflow) to a tracked, reproducible training run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from airflow_provider_dltrain.lake.filters import DataFilter
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.backends import Backend, get_backend
from airflow_provider_dltrain.training.rank_job import RankJob, TrainFn
from airflow_provider_dltrain.training.request import TrainingRequest
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
    :param extra_tracking: tracking targets beside MLflow, on every backend (rank 0 records them,
        in this process or in the job): ``{"wandb": {"project": ..., "entity": ..., "mode":
        "offline", "required": False}}`` records the run in W&B too (see
        :mod:`airflow_provider_dltrain.training.wandb_tracking`).

    Identical rows (in whatever files), code, ``hparams`` (seed included) and world size give
    bit-identical weights and metrics on CPU.

    The keywords become one :class:`~airflow_provider_dltrain.training.request.TrainingRequest`,
    checked before any work starts (a bad field raises ``InvalidSpecError`` naming it), which
    :func:`run_training_request` trains; build the request yourself to keep, compare or vary it.
    """
    return run_training_request(
        TrainingRequest(
            train_fn,
            dataset,
            hparams,
            backend=backend,
            backend_options=backend_options,
            data_filter=data_filter,
            tracking=tracking,
            experiment_name=experiment_name,
            run_name=run_name,
            tags=tags,
            cutoff=cutoff,
            storage_options=storage_options,
            code_version=code_version,
            early_stopping=early_stopping,
            non_finite=non_finite,
            run_key=run_key,
            aws_clients=aws_clients,
            poll_interval=poll_interval,
            extra_tracking=extra_tracking,
        )
    )


def run_training_request(request: TrainingRequest) -> TrainResult:
    """Train as ``request`` describes: what :func:`run_training` does once its keywords are checked.

    ``TrainModelOperator`` calls this with the request it builds for a task try; call it yourself
    to keep one :class:`~airflow_provider_dltrain.training.request.TrainingRequest` and train it
    more than once (``dataclasses.replace(request, hparams=...)`` for a variant).
    """
    if request.remote:
        from airflow_provider_dltrain.training.remote import run_remote

        return run_remote(request)
    return _train_in_process(request)


def _train_in_process(request: TrainingRequest) -> TrainResult:
    """``run_training`` on a backend of this process (local, torch_distributor, horovod, an object)."""
    from airflow_provider_dltrain.training.finite import check_report
    from airflow_provider_dltrain.training.wandb_tracking import run_spec

    non_finite = request.non_finite
    runner = get_backend(request.backend, request.backend_options)
    run = start_tracked_run(request, backend_name=runner.name, world_size=runner.world_size)
    fn, plan, params, seed, config, run_id = run.fn, run.plan, run.params, run.seed, run.config, run.run_id
    experiment_id, all_tags = run.experiment_id, run.tags
    wandb = run_spec(
        request.extra_tracking,
        all_tags,
        run_id=run_id if config else None,
        experiment_id=experiment_id,
        tracking_uri=config.tracking_uri if config else None,
    )
    with failure_ends_run(config, run_id):
        job = RankJob(
            fn,
            plan,
            params,
            seed,
            _run_dir(run_id, runner, plan),
            config,
            run_id if config else None,
            early_stopping=dict(request.early_stopping) if request.early_stopping else None,
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


__all__ = [
    "IDENTITY_TAGS",
    "TrackedRun",
    "TrainResult",
    "TrainingRequest",
    "data_cutoff",
    "failure_ends_run",
    "finish_tracked_run",
    "load_train_fn",
    "run_identity",
    "run_training",
    "run_training_request",
    "start_tracked_run",
]
