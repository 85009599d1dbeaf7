"""``TrainContext``: everything a training function may know about where and how it runs.

A training function ``train(ctx) -> dict[str, float]`` sees hyper-parameters, its rank, a device,
data loaders over one pinned Delta version, and a few verbs (wrap, log, save). It never sees
Airflow, Spark, MLflow URIs or the addresses of other ranks, so the same function runs in a
notebook, in one Airflow task, as a DDP job on Spark, or in a cloud training container.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.training.loader import DeltaLoader, default_columns
from airflow_provider_dltrain.training.loader_spec import Batch, LoaderSpec, Mode, Split

if TYPE_CHECKING:
    from airflow_provider_dltrain.experiments.stopping import StopDecision, TrialStopper
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.training.finite import FiniteGuard
    from airflow_provider_dltrain.training.tracking import RankTracker

log = logging.getLogger("airflow_provider_dltrain.training")

ReduceOp = Literal["sum", "mean", "max", "min"]
REDUCE_OPS = ("sum", "mean", "max", "min")


class Collectives(Protocol):
    """How ranks talk when they are not a ``torch.distributed`` process group (Horovod, say)."""

    def wrap(self, model: Any) -> Any: ...

    def allreduce(self, tensor: Any, op: ReduceOp) -> Any: ...

    def barrier(self) -> None: ...


@dataclass(frozen=True)
class RankSeat:
    """Where this process sits in the job: its rank among ``world_size``, its rank on this machine,
    its device, and how ranks talk when not through ``torch.distributed`` (Horovod's collectives)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: Any = None
    collectives: Collectives | None = None


@dataclass(frozen=True)
class Watch:
    """Who watches the run: its MLflow tracker, a search's early-stopping judge (rank 0), whether the
    run stops early at all, and rank 0's check of non-finite metrics."""

    tracker: RankTracker | None = None
    stopper: TrialStopper | None = None
    early_stopping: bool = False
    guard: FiniteGuard | None = None


class TrainContext:
    """The training function's only handle on the outside world.

    :ivar hparams: hyper-parameters (a copy; ``seed`` included when given).
    :ivar rank: this process's rank, ``0 <= rank < world_size``.
    :ivar world_size: number of training processes.
    :ivar local_rank: rank on this machine (selects the GPU when there is one).
    :ivar device: ``torch.device`` to put the model and batches on.
    :ivar seed: the run's seed; torch, numpy and ``random`` are seeded with it before ``train`` starts.
    :ivar checkpoint_dir: a directory for checkpoints (shared by ranks on one machine).
    """

    def __init__(
        self,
        *,
        plan: ScanPlan,
        hparams: Mapping[str, Any],
        checkpoint_dir: str,
        seed: int = 0,
        rank: RankSeat | None = None,
        watch: Watch | None = None,
    ) -> None:
        import torch

        seat, watch = rank or RankSeat(), watch or Watch()
        self.plan = plan
        self.hparams = dict(hparams)
        self.rank, self.world_size, self.local_rank = seat.rank, seat.world_size, seat.local_rank
        self.device = seat.device if seat.device is not None else torch.device("cpu")
        self.seed = seed
        self.checkpoint_dir = checkpoint_dir
        self.tracker = watch.tracker
        self.stopper = watch.stopper  # rank 0's early-stopping judge when this run is a trial of a search
        # every rank knows; rank 0 judges
        self.early_stopping = watch.early_stopping or watch.stopper is not None
        self.collectives = seat.collectives  # None: torch.distributed (DDP) when world_size > 1
        self.guard = watch.guard  # rank 0's check of non-finite metrics (the reported ones); None elsewhere
        self.stop_decision: StopDecision | None = None
        self.last_metrics: dict[str, float] = {}
        self._handles_stopping = False
        self.model: Any = None  # the unwrapped model given to ``wrap``
        self.model_uri: str | None = None
        self.rows_seen: dict[str, int] = {}
        self._example: Any = None
        self._started = self._last_time = time.monotonic()
        self._last_rows = 0

    @property
    def dataset(self) -> DeltaRef:
        """The pinned Delta version this run reads."""
        return self.plan.ref

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes to MLflow."""
        return self.rank == 0

    # -- data -----------------------------------------------------------------------------------
    def dataloader(
        self,
        batch_size: int,
        *,
        split: Split = None,
        key: str | None = None,
        validation_fraction: float = 0.2,
        columns: Sequence[str] | None = None,
        shuffle: bool | None = None,
        drop_last: bool = False,
        num_workers: int = 0,
        multiprocessing_context: str | None = None,
        mode: Mode = "auto",
        memory_budget_mb: float | None = None,
        shuffle_buffer_mb: float = 256.0,
    ) -> DeltaLoader:
        """Batches of this rank's share of the pinned version, as ``{column: tensor}`` dicts.

        :param batch_size: rows per batch on this rank (the global batch is ``batch_size * world_size``).
        :param split: ``"train"`` or ``"validation"`` (needs ``key``), or ``None`` for all rows.
        :param key: stable row key column; a row's split depends only on its key, so it stays
            the same in every later version of the table.
        :param columns: columns to load; default every numeric or list-of-numbers column.
        :param shuffle: default ``True`` except for the validation split; seeded by ``seed`` + epoch.
        :param num_workers: DataLoader worker processes; 0 (the measured fast path) reads in-process.
            Workers only read Parquet with pyarrow (the file list was resolved here), so ``fork``
            is safe; pass ``multiprocessing_context="spawn"`` when other libraries need it.
        :param mode: ``"memory"`` (read the selection once, global shuffle), ``"stream"`` (row
            groups through a bounded shuffle buffer) or ``"auto"``: memory when the selected
            columns fit ``memory_budget_mb``.
        :param memory_budget_mb: what ``"auto"`` allows in memory per process; default
            ``$DLTRAIN_LOADER_MEMORY_MB``, else a quarter of the machine's memory.
        :param shuffle_buffer_mb: memory of the streaming shuffle buffer.
        """
        if split not in (None, "train", "validation"):
            raise InvalidSpecError(f"split must be 'train', 'validation' or None, got {split!r}")
        if split is not None and not key:
            raise InvalidSpecError(
                f"split={split!r} needs key=<stable row key column>, e.g. key='source_file'"
            )
        if key and key not in self.plan.schema.names:
            raise InvalidSpecError(
                f"split key {key!r} is not a column of {self.plan.ref.uri}; columns: {self.plan.schema.names}"
            )
        spec = LoaderSpec(
            plan=self.plan,
            batch_size=int(batch_size),
            columns=default_columns(self.plan, columns),
            split=split,
            key=key,
            validation_fraction=float(validation_fraction),
            shuffle=(split != "validation") if shuffle is None else bool(shuffle),
            drop_last=drop_last,
            seed=self.seed,
            rank=self.rank,
            world_size=self.world_size,
            mode=mode,
            memory_budget_mb=memory_budget_mb,
            shuffle_buffer_mb=float(shuffle_buffer_mb),
        )
        return DeltaLoader(
            spec,
            num_workers=num_workers,
            multiprocessing_context=multiprocessing_context,
            on_batch=lambda b, n: self._count(split, b, n),
        )

    def _count(self, split: Split, batch: Batch, rows: int) -> None:
        name = split or "all"
        self.rows_seen[name] = self.rows_seen.get(name, 0) + rows
        if self._example is None:
            import torch

            for value in batch.values():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and len(value) >= 2:
                    self._example = value[:5].detach().clone()
                    break

    # -- model ----------------------------------------------------------------------------------
    def wrap(self, model: Any) -> Any:
        """Move ``model`` to the device; with ``world_size > 1``, make its gradients averaged over ranks.

        That is DistributedDataParallel, or under Horovod the same model with rank 0's initial state
        broadcast and gradients averaged by Horovod as ``backward`` produces them.
        """
        model = model.to(self.device)
        self.model = model
        if self.world_size <= 1:
            return model
        if self.collectives is not None:
            return self.collectives.wrap(model)
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # gradients live in the all-reduce buckets: one copy fewer per step
        return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)

    def save_model(self, model: Any, input_example: Any = None, *, name: str = "model") -> str | None:
        """Log the model (rank 0 only; other ranks return ``None``) and return its model URI.

        ``input_example`` (a few rows of model input) defines the signature; by default the first
        rows of the first floating-point column of the first batch this rank loaded.
        """
        if not self.is_main:
            return None
        inner = getattr(model, "module", model)
        from airflow_provider_dltrain.training.tracking import RankTracker

        if self.guard is not None:  # before anything is written: a NaN model is never logged
            self.guard.before_save(self.last_metrics, inner)
        tracker = self.tracker or RankTracker(self.checkpoint_dir)
        example = input_example if input_example is not None else self._example
        self.model_uri = tracker.log_model(inner, example, name=name)
        return self.model_uri

    # -- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, state: Mapping[str, Any], name: str = "last") -> str | None:
        """Save ``state`` (state dicts, the epoch, tensors, numbers) as ``<checkpoint_dir>/<name>.pt``.

        Rank 0 writes (other ranks return ``None``), whole or not at all, so a job that is stopped
        mid-write - a reclaimed spot instance - resumes from the previous checkpoint. Where the
        backend keeps the directory across restarts (SageMaker's checkpoint path), a resumed job
        finds it with :meth:`load_checkpoint`.
        """
        if not self.is_main:
            return None
        import os

        import torch

        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = os.path.join(self.checkpoint_dir, f"{name}.pt")
        torch.save(dict(state), f"{path}.tmp")
        os.replace(f"{path}.tmp", path)
        return path

    def load_checkpoint(self, name: str = "last") -> dict[str, Any] | None:
        """The state last saved with :meth:`save_checkpoint` (tensors and plain values only), or ``None``."""
        import os

        import torch

        path = os.path.join(self.checkpoint_dir, f"{name}.pt")
        if not os.path.exists(path):
            return None
        state = torch.load(path, map_location="cpu", weights_only=True)
        log.info("resuming from checkpoint %s", path)
        return dict(state)

    # -- metrics --------------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record metrics of ``step`` (an epoch index, say) in MLflow and the task log (rank 0 only).

        In a trial with early stopping every rank must call it (the decision is shared by all ranks);
        when the rule stops the trial it raises :class:`TrialStopped` (a clean end, not a failure),
        unless the function asks :meth:`should_stop` itself. A NaN or infinite value raises
        :class:`~airflow_provider_dltrain.exceptions.NonFiniteError` on rank 0 once recorded, when
        the run's ``non_finite`` is ``"fail_at_any_step"``.
        """
        values = {str(k): float(v) for k, v in metrics.items()}
        self.last_metrics.update(values)
        if self.is_main:
            if self.tracker is not None:
                self.tracker.log_metrics(values, step)
            log.info("%s", self._progress(values, step))
            if self.guard is not None:
                self.guard.logged(values, step)
        if self.early_stopping and self.stop_decision is None:
            self._decide(values, step)

    def _decide(self, values: Mapping[str, float], step: int | None) -> None:
        from airflow_provider_dltrain.experiments.stopping import StopDecision
        from airflow_provider_dltrain.training.errors import TrialStopped

        decision = self.stopper.observe(values, step) if self.stopper is not None else None
        stop = bool(decision and decision.stop)
        if self.world_size > 1:  # every rank leaves the loop at the same step, or DDP would hang
            stop = self.allreduce({"stop": float(stop)}, op="max")["stop"] > 0
        if not stop:
            return
        self.stop_decision = decision or StopDecision(True, int(step or 0), "rank 0's rule stopped the trial")
        log.info("trial stopped early at step %s: %s", self.stop_decision.step, self.stop_decision.reason)
        if not self._handles_stopping:
            raise TrialStopped(self.stop_decision.step, self.stop_decision.reason)

    def should_stop(self) -> bool:
        """True once the early-stopping rule has ended this trial (at the last ``log_metrics``).

        A function that calls it handles stopping itself (break, save the model, return):
        ``log_metrics`` then no longer raises :class:`TrialStopped`. Always False outside a search.
        """
        self._handles_stopping = True
        return self.stop_decision is not None

    def _progress(self, values: Mapping[str, float], step: int | None) -> str:
        now = time.monotonic()
        rows = self.rows_seen.get("train", 0) + self.rows_seen.get("all", 0)
        rate = (rows - self._last_rows) * self.world_size / max(now - self._last_time, 1e-9)
        self._last_time, self._last_rows = now, rows
        shown = " ".join(f"{k}={v:.4g}" for k, v in values.items())
        epochs = self.hparams.get("epochs")
        head = (
            f"epoch {step + 1}/{epochs}" if step is not None and isinstance(epochs, int) else f"step {step}"
        )
        text = f"{head} {shown} samples/s={rate:.0f}"
        if step is not None and isinstance(epochs, int) and step + 1 < epochs:
            eta = (now - self._started) / (step + 1) * (epochs - step - 1)
            text += f" eta={eta:.0f}s"
        return text

    def allreduce(self, values: Mapping[str, float], op: ReduceOp = "sum") -> dict[str, float]:
        """Combine per-rank numbers (e.g. correct predictions and counts) across all ranks."""
        if self.world_size <= 1:
            return {k: float(v) for k, v in values.items()}
        if op not in REDUCE_OPS:
            raise InvalidSpecError(f"allreduce op must be one of {sorted(REDUCE_OPS)}, got {op!r}")
        import torch

        keys = sorted(values)
        # on the rank's device: NCCL only reduces CUDA tensors (gloo takes CPU ones)
        tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.device)
        if self.collectives is not None:
            return dict(zip(keys, self.collectives.allreduce(tensor, op).tolist(), strict=True))
        import torch.distributed as dist

        reduce_op = {
            "sum": dist.ReduceOp.SUM,
            "mean": dist.ReduceOp.SUM,
            "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN,
        }
        dist.all_reduce(tensor, op=reduce_op[op])
        if op == "mean":
            tensor /= self.world_size
        return dict(zip(keys, tensor.tolist(), strict=True))

    def barrier(self) -> None:
        """Wait until every rank reaches this point."""
        if self.world_size > 1 and self.collectives is not None:
            self.collectives.barrier()
        elif self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()
