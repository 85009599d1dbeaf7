"""What runs in every training process: set up the rank, call ``train(ctx)``, report the outcome.

``run_rank(payload)`` is the entry point any launcher can call - TorchDistributor (torchrun), a
SageMaker container, an EC2 node - because it reads its rank from the standard torchrun
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``). Each rank writes
``ranks/rank-<r>.json`` (or ``errors/rank-<r>.json`` with its traceback) under the run directory -
a local directory, or a URI on shared storage when ranks run on other machines (see
:mod:`~airflow_provider_dltrain.training.rundir`) - so the launcher can name the rank that failed first.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.rundir import checkpoint_uri, rank_checkpoints, write_json

if TYPE_CHECKING:
    from airflow_provider_dltrain.training.tracking import RankTracker
    from airflow_provider_dltrain.training.wandb_tracking import WandbSpec

TrainFn = Callable[[Any], Mapping[str, float]]
log = logging.getLogger("airflow_provider_dltrain.training")


@dataclass(frozen=True)
class RankJob:
    """Everything a rank needs; pickled once by the launcher (no secrets in ``repr``)."""

    train_fn: TrainFn
    plan: ScanPlan
    hparams: Mapping[str, Any]
    seed: int
    run_dir: str
    tracking: TrackingConfig | None = field(default=None, repr=False)
    mlflow_run_id: str | None = None
    timeout_s: float = 1800.0
    # A local directory the launcher keeps across restarts (SageMaker's checkpoint path, synced to
    # S3 and restored when a spot job resumes); ranks then write checkpoints there directly.
    checkpoint_path: str | None = None
    # a search trial's early stopping: {"spec": StoppingSpec dict, "parent_run_id": ..., "trial": name}
    early_stopping: Mapping[str, Any] | None = None
    # what rank 0 does with a NaN or infinite metric (see training/finite.py)
    non_finite: str = "fail_at_end"
    # a W&B run beside the MLflow one (see training/wandb_tracking.py); None: MLflow only
    wandb: WandbSpec | None = None

    @property
    def checkpoint_dir(self) -> str:
        """``<run_dir>/checkpoints`` (a URI when the run directory is on shared storage)."""
        return self.checkpoint_path or checkpoint_uri(self.run_dir)

    @property
    def storage_options(self) -> StorageOptions:
        """Credentials for a run directory on object storage: the job's own, those that read the table."""
        return dict(self.plan.storage_options)


def seed_everything(seed: int) -> None:
    """Seed ``random``, numpy and torch (CPU and CUDA) identically in every rank.

    DDP also broadcasts rank 0's initial weights; DataLoader workers are seeded from ``seed`` by
    the loader. Kernels are made deterministic by :func:`deterministic_torch`.
    """
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


INDUCTOR_DETERMINISTIC_ENV = "TORCHINDUCTOR_DETERMINISTIC"


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=...)`` without importing inductor.

    torch's function imports ``torch._inductor.config`` only to set its ``deterministic`` flag: about
    1.5 s of CPU in every rank, for a compiler most training functions never load. The kernels'
    flag is set directly; inductor's through its own environment variable (read when it is first
    imported, e.g. by ``torch.compile`` inside the training function) and, when it is already
    loaded, on its config.
    """
    import sys

    import torch

    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
    if mode:
        os.environ[INDUCTOR_DETERMINISTIC_ENV] = "1"
    else:
        os.environ.pop(INDUCTOR_DETERMINISTIC_ENV, None)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = mode  # type: ignore[attr-defined]


@contextlib.contextmanager
def deterministic_torch() -> Iterator[None]:
    """Run the block with deterministic torch kernels; the caller's settings come back afterwards.

    On CPU an op without a deterministic kernel raises (``warn_only=False``): bit-identical runs are
    the contract there. On CUDA such ops only warn, so a model using one still trains; cuBLAS gets
    the fixed workspace it needs for reproducible matmuls and cuDNN stops benchmarking algorithms.
    """
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        # read when cuBLAS creates its handle: must be in place before the first CUDA matmul
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    cudnn = torch.backends.cudnn
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        cudnn.benchmark,
        cudnn.deterministic,
        os.environ.get(INDUCTOR_DETERMINISTIC_ENV),
    )
    _set_deterministic(True, warn_only=cuda)
    cudnn.benchmark, cudnn.deterministic = False, True
    try:
        yield
    finally:
        _set_deterministic(before[0], warn_only=before[1])
        if before[4] is not None:
            os.environ[INDUCTOR_DETERMINISTIC_ENV] = before[4]
        cudnn.benchmark, cudnn.deterministic = before[2], before[3]


def weights_digest(model: Any) -> str | None:
    """sha256 over the model's ``state_dict`` tensors (equal on all ranks after a correct DDP run)."""
    if model is None:
        return None
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _device(local_rank: int) -> Any:
    import torch

    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def execute(
    job: RankJob, rank: int = 0, world_size: int = 1, local_rank: int = 0, collectives: Any = None
) -> dict[str, Any]:
    """Run ``train(ctx)`` as ``rank``; return this rank's report (metrics, model URI, weights digest).

    ``collectives``: how ranks talk when not through ``torch.distributed`` (see ``TrainContext``).
    """
    import torch

    from airflow_provider_dltrain.training.context import RankSeat, TrainContext, Watch
    from airflow_provider_dltrain.training.finite import FiniteGuard

    started = time.monotonic()
    guard = FiniteGuard(job.non_finite) if rank == 0 else None  # rank 0's metrics are the reported ones
    with _checkpoints(job, rank) as checkpoint_dir:
        tracker = _tracker(job, rank, checkpoint_dir)
        ctx = TrainContext(
            plan=job.plan,
            hparams=job.hparams,
            checkpoint_dir=checkpoint_dir,
            seed=job.seed,
            rank=RankSeat(rank, world_size, local_rank, _device(local_rank), collectives),
            watch=Watch(tracker, _stopper(job, rank), job.early_stopping is not None, guard),
        )
        with _closing(tracker) as final:
            with deterministic_torch():
                # last thing before train: setting up MLflow may draw random numbers
                seed_everything(job.seed)
                metrics = _train(job, ctx)
            if guard is not None:
                _final_check(guard, ctx, metrics)
            final.update(metrics)
    report = {
        "rank": rank,
        "world_size": world_size,
        "metrics": metrics,
        "model_uri": ctx.model_uri,
        "weights_sha256": weights_digest(ctx.model),
        "rows_seen": ctx.rows_seen,
        "torch_threads": torch.get_num_threads(),  # float sums depend on it: same count, same bits
        "logged_metric_keys": sorted(tracker.logged_keys) if tracker else [],
        "elapsed_s": round(time.monotonic() - started, 3),
        "stopped": _stopped(ctx),
        "collectives": _collectives_name(collectives, world_size),
        "non_finite": guard.seen if guard is not None else None,
    }
    write_json(job.run_dir, "ranks", f"rank-{rank}.json", report, job.storage_options)
    return report


def _collectives_name(collectives: Any, world_size: int) -> str:
    """How the ranks talked: ``horovod/mpi``, ``horovod/gloo``, ``torch.distributed/gloo``, ``none``."""
    import torch.distributed as dist

    if collectives is not None:
        return str(getattr(collectives, "name", type(collectives).__name__))
    if world_size > 1 and dist.is_available() and dist.is_initialized():
        return f"torch.distributed/{dist.get_backend()}"
    return "none"


@contextlib.contextmanager
def _closing(tracker: RankTracker | None) -> Iterator[dict[str, float]]:
    """Tell the tracker the rank is done, with the final metrics put in the yielded dict or the error."""
    final: dict[str, float] = {}
    try:
        yield final
    except BaseException as err:
        if tracker is not None:
            tracker.close(final, err)
        raise
    if tracker is not None:
        tracker.close(final, None)


def _checkpoints(job: RankJob, rank: int) -> contextlib.AbstractContextManager[str]:
    if job.checkpoint_path:
        os.makedirs(job.checkpoint_path, exist_ok=True)
        return contextlib.nullcontext(job.checkpoint_path)
    return rank_checkpoints(job.run_dir, rank, job.storage_options)


def _train(job: RankJob, ctx: Any) -> dict[str, float]:
    """``train(ctx)``'s metrics; a trial the rule stopped returns its last logged metrics instead, and
    keeps the model as it is at that step when the function had not saved it yet."""
    from airflow_provider_dltrain.training.errors import TrialStopped

    try:
        return _check_metrics(job.train_fn(ctx))
    except TrialStopped:
        if ctx.model is not None and ctx.model_uri is None:
            ctx.save_model(ctx.model)
        return dict(ctx.last_metrics)


def _final_check(guard: Any, ctx: Any, metrics: Mapping[str, float]) -> None:
    """Fail on non-finite final metrics; a model saved before they were known is taken back."""
    from airflow_provider_dltrain.exceptions import NonFiniteError

    try:
        guard.final(metrics, ctx.last_metrics)
    except NonFiniteError:
        if ctx.model_uri and ctx.tracker is not None:
            ctx.tracker.discard_model(ctx.model_uri)
        raise


def _stopped(ctx: Any) -> dict[str, Any] | None:
    decision = ctx.stop_decision
    return {"step": decision.step, "reason": decision.reason} if decision is not None else None


def _stopper(job: RankJob, rank: int) -> Any:
    """Rank 0's early-stopping judge, reading the other trials from the tracking store."""
    if rank != 0 or job.early_stopping is None or job.tracking is None:
        return None
    from airflow_provider_dltrain.experiments.stopping import StoppingSpec, TrialStopper

    spec = StoppingSpec.coerce(job.early_stopping["spec"])
    return TrialStopper(
        spec, job.tracking, str(job.early_stopping["parent_run_id"]), str(job.early_stopping["trial"])
    )


def _tracker(job: RankJob, rank: int, checkpoint_dir: str) -> RankTracker | None:
    """Rank 0's recorder: into the MLflow run, or the model's ``state_dict`` among the checkpoints."""
    from airflow_provider_dltrain.training.tracking import MlflowRankTracker, RankTracker

    if rank != 0:
        return None
    if job.tracking is not None and job.mlflow_run_id:
        tracker: RankTracker = MlflowRankTracker(checkpoint_dir, job.tracking, job.mlflow_run_id)
    else:
        # a scratch copy of a shared run directory: the model path handed on names the shared place
        published = None if checkpoint_dir == job.checkpoint_dir else job.checkpoint_dir
        tracker = RankTracker(checkpoint_dir, published)
    if job.wandb is None:
        return tracker
    from airflow_provider_dltrain.training.wandb_tracking import wandb_tracker

    return wandb_tracker(tracker, job)


def _check_metrics(result: Any) -> dict[str, float]:
    if not isinstance(result, Mapping):
        raise InvalidSpecError(
            f"the training function must return dict[str, float] (final metrics), got {type(result).__name__}"
        )
    try:
        return {str(k): float(v) for k, v in result.items()}
    except (TypeError, ValueError) as err:
        raise InvalidSpecError(
            f"the training function returned a metric that is not a number: {result!r:.300}"
        ) from err


def record_failure(
    run_dir: str, rank: int, err: BaseException, options: StorageOptions | None = None
) -> None:
    """Write the failing rank's traceback where the launcher looks for it (``options``: for ``s3://``).

    A write that fails is logged, not raised: the rank's own error must stay the one that propagates.
    """
    report = {
        "rank": rank,
        "type": type(err).__name__,
        "message": str(err),
        "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__)),
        "user_error": isinstance(err, DltrainUserError),
        "time": time.time(),
    }
    try:
        write_json(run_dir, "errors", f"rank-{rank}.json", report, dict(options or {}))
    except Exception as write_err:
        log.warning("rank %d could not record its error under %s: %s", rank, run_dir, write_err)


def run_rank(payload: bytes) -> dict[str, Any]:
    """Entry point of one training process started by torchrun (or any launcher setting its variables)."""
    from airflow_provider_dltrain.training.pickling import loads

    return run_rank_job(loads(payload))


def run_rank_job(job: RankJob) -> dict[str, Any]:
    """:func:`run_rank` for a job built in this process (a cloud job's entry point builds its own)."""
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if rank == 0 and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(message)s")
    distributed = world_size > 1 and not dist.is_initialized()
    try:
        if distributed:
            import torch

            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(local_rank)  # else every rank's NCCL communicator lands on cuda:0
            dist.init_process_group(backend=backend, timeout=timedelta(seconds=job.timeout_s))
        report = execute(job, rank, world_size, local_rank)
        if world_size > 1:
            # every rank returns rank 0's report: torchrun launchers keep whichever output came last
            shared: list[Any] = [report if rank == 0 else None]
            dist.broadcast_object_list(shared, src=0)
            report = shared[0]
    except BaseException as err:
        # no destroy_process_group here: peers may sit in a collective; torchrun stops them
        record_failure(job.run_dir, rank, err, job.storage_options)
        raise
    if distributed:
        dist.destroy_process_group()
    return dict(report)
