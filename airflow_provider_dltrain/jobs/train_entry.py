"""One rank of a remote training job: read the spec, train on the pinned version, report.

Started by ``jobs/entry.py`` (itself started by ``job_script.py`` under torchrun, mpirun or a
plain ``python``) when the spec's ``kind`` is ``"train"``. Rank and world come from torchrun's
variables; rank 0 writes its report (the one the local backends return) to ``result_uri``, or
``{"error": ..., "user_error": ...}`` when it failed. The exit status is the outcome.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any

from airflow_provider_dltrain.engines.objects import write_object as write_uri
from airflow_provider_dltrain.engines.train_spec import CHECKPOINT_DIR_ENV, SECRET_ENV, TrainJobSpec
from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS

log = logging.getLogger("airflow_provider_dltrain.jobs.train_entry")
SM_FAILURE_FILE = "/opt/ml/output/failure"
FAILURE_FILE_ENV = "DLTRAIN_FAILURE_FILE"  # where the job reports why it failed (default: SageMaker's)


def job_tracking(spec: TrainJobSpec) -> TrackingConfig | None:
    """The MLflow store with the credentials from the job's environment (or the secret it names).

    They are taken out of ``os.environ``: the training function and its children never see them.
    """
    if not spec.tracking_uri:
        return None
    secret_id = os.environ.pop(SECRET_ENV, None)
    env = {k: os.environ.pop(k) for k in CREDENTIAL_KEYS if os.environ.get(k)}
    if secret_id:
        env = read_secret(secret_id)
    return TrackingConfig(tracking_uri=spec.tracking_uri, registry_uri=spec.registry_uri, env=env)


def read_secret(secret_id: str) -> dict[str, str]:
    """``MLFLOW_TRACKING_*`` values from a Secrets Manager secret holding a JSON object."""
    import boto3

    raw = boto3.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise InvalidSpecError(
            f"secret {secret_id!r} is not a JSON object; store e.g. "
            '{"MLFLOW_TRACKING_USERNAME": "...", "MLFLOW_TRACKING_PASSWORD": "..."}'
        ) from err
    found = {k: str(v) for k, v in dict(data).items() if k in CREDENTIAL_KEYS and v}
    if not found:
        raise InvalidSpecError(f"secret {secret_id!r} holds none of {list(CREDENTIAL_KEYS)}")
    return found


def launched_ranks() -> tuple[int, int, bool]:
    """``(rank, world size, horovod)`` from the launcher's variables.

    torchrun sets ``RANK``/``WORLD_SIZE``; ``horovodrun`` sets ``HOROVOD_RANK``/``HOROVOD_SIZE`` and
    ``mpirun`` (SageMaker's MPI distribution, the Horovod route) ``OMPI_COMM_WORLD_RANK``/``_SIZE``:
    those ranks then train through Horovod, the others through ``torch.distributed``.
    """
    for rank_var, size_var in (
        ("HOROVOD_RANK", "HOROVOD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, "1")), True
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), False


def train(spec: TrainJobSpec) -> dict[str, Any]:
    """Run this rank of ``spec`` and return its report (rank 0's is the job's)."""
    from airflow_provider_dltrain.lake.scan_plan import resolve
    from airflow_provider_dltrain.training.rank_job import RankJob, run_rank_job
    from airflow_provider_dltrain.training.runner import load_train_fn
    from airflow_provider_dltrain.training.wandb_tracking import WandbSpec

    _, world, horovod = launched_ranks()
    if world != spec.world_size:
        raise InvalidSpecError(
            f"the job started {world} rank(s) but the spec says world_size={spec.world_size}: "
            "instance count x processes per host must equal it (results depend on the world size)"
        )
    tracking = job_tracking(spec)
    plan = resolve(spec.dataset, spec.data_filter or None, None)
    if plan.fingerprint != spec.data_fingerprint:
        raise InvalidSpecError(
            f"{plan.ref.uri} version {plan.ref.version} with filter {spec.data_filter} selects other rows "
            f"here (fingerprint {plan.fingerprint[:12]}) than the launcher saw ({spec.data_fingerprint[:12]})"
        )
    job = RankJob(
        load_train_fn(spec.train_fn),
        plan,
        spec.hparams,
        spec.seed,
        spec.run_dir,
        tracking,
        spec.mlflow_run_id,
        timeout_s=spec.timeout_s,
        checkpoint_path=os.environ.get(CHECKPOINT_DIR_ENV) or None,
        non_finite=spec.non_finite,
        wandb=WandbSpec.from_dict(spec.wandb) if spec.wandb else None,
    )
    if horovod:
        from airflow_provider_dltrain.training.horovod_backend import run_horovod_job

        return run_horovod_job(job)
    return run_rank_job(job)


def write_failure_file(reason: str) -> None:
    """Tell the service why the job failed (SageMaker shows ``/opt/ml/output/failure`` as FailureReason).

    The first rank to fail writes it; later ranks (failing because a peer left) keep its reason.
    """
    path = os.environ.get(FAILURE_FILE_ENV) or (
        SM_FAILURE_FILE if os.path.isdir(os.path.dirname(SM_FAILURE_FILE)) else ""
    )
    if not path or os.path.exists(path):
        return
    try:
        with open(path, "x") as handle:
            handle.write(reason[:1000])
    except OSError as err:
        log.warning("could not write the failure reason to %s: %s", path, err)


def run(spec: TrainJobSpec) -> int:
    rank = launched_ranks()[0]
    log.info(
        "rank %d: training %s on %s (dag %s, run %s, task %s, try %s)",
        rank,
        spec.train_fn,
        spec.dataset.get("uri"),
        spec.identity.dag_id,
        spec.identity.run_id,
        spec.identity.task_id,
        spec.identity.try_number,
    )
    try:
        report = train(spec)
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
        if rank == 0 and spec.result_uri:
            outcome = {
                "error": message[:4000],
                "user_error": isinstance(err, DltrainUserError),
                "traceback": traceback.format_exc()[-4000:],
            }
            write_uri(spec.result_uri, json.dumps(outcome).encode())
        print(f"dltrain job failed on rank {rank}: {message[:2000]}", file=sys.stderr, flush=True)
        write_failure_file(f"rank {rank}: {message}")
        return 1
    if rank == 0 and spec.result_uri:
        write_uri(spec.result_uri, json.dumps(report, sort_keys=True, default=str).encode())
        log.info("result: %s", json.dumps(report, sort_keys=True, default=str))
    return 0
