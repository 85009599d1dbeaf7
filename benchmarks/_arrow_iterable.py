"""The peer of ``bench_loader``: a torch IterableDataset over a pyarrow dataset's record batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset


class ArrowBatches(IterableDataset):
    """Record batches of ``paths`` as ``{features, label}`` tensors, in file order."""

    def __init__(self, paths: list[str], batch_size: int) -> None:
        self.paths, self.batch_size = paths, batch_size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import pyarrow.dataset as pads
        import torch

        dataset = pads.dataset(self.paths, format="parquet")
        for batch in dataset.to_batches(columns=["features", "label"], batch_size=self.batch_size):
            values = batch.column("features").flatten().to_numpy(zero_copy_only=False)
            yield {
                "features": torch.from_numpy(values.reshape(-1, 64)),
                "label": torch.from_numpy(batch.column("label").to_numpy(zero_copy_only=False)),
            }
