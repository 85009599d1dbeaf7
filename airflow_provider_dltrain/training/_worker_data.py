"""The torch ``IterableDataset`` handed to DataLoader worker processes (importable, so spawn works)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from torch.utils.data import IterableDataset, get_worker_info

from airflow_provider_dltrain.training.loader_spec import Batch, LoaderSpec

if TYPE_CHECKING:
    from airflow_provider_dltrain.training.stream import Unit

# ``loader.iter_batches``, handed in by the loader (a module-level function: pickled by reference)
IterBatches = Callable[[LoaderSpec, int, int, int, "tuple[Unit, ...] | None"], Iterator[Batch]]


class EpochBatches(IterableDataset):
    """One epoch of one rank's batches, dealt round-robin to the DataLoader's workers."""

    def __init__(
        self, iterate: IterBatches, spec: LoaderSpec, epoch: int, units: tuple[Unit, ...] | None = None
    ) -> None:
        self.iterate = iterate
        self.spec, self.epoch, self.units = spec, epoch, units  # units: the parent's streaming survey

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, count = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.iterate(self.spec, self.epoch, worker, count, self.units)


def seed_worker(worker_id: int) -> None:
    """Seed numpy and ``random`` in a DataLoader worker from torch's seed for it (base seed + id)."""
    import random

    import numpy as np
    import torch

    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
