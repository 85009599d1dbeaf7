"""The torch ``IterableDataset`` handed to DataLoader worker processes (importable, so spawn works)."""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import IterableDataset, get_worker_info

from airflow_provider_dltrain.training.loader import Batch, LoaderSpec, iter_batches


class EpochBatches(IterableDataset):
    """One epoch of one rank's batches, dealt round-robin to the DataLoader's workers."""

    def __init__(self, spec: LoaderSpec, epoch: int) -> None:
        self.spec, self.epoch = spec, epoch

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, count = (info.id, info.num_workers) if info is not None else (0, 1)
        return iter_batches(self.spec, self.epoch, worker, count)
