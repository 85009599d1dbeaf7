"""What a rank's loader reads and how it deals rows: the spec, the step layout and the split.

A leaf of the loader: ``loader`` (in memory), ``stream`` (streamed) and the DataLoader workers'
dataset all read these, and none of them is needed to read this.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.lake.scan_plan import ScanPlan

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

Split = Literal["train", "validation"] | None
Mode = Literal["auto", "memory", "stream"]
Batch = dict[str, Any]
MEMORY_BUDGET_ENV = "DLTRAIN_LOADER_MEMORY_MB"
SPLIT_SALT = b"dltrain-split-v1"


def step_layout(num_rows: int, batch_size: int, world_size: int, drop_last: bool = False) -> list[int]:
    """Sizes of the global steps of one epoch (each at most ``batch_size * world_size`` rows)."""
    if batch_size < 1 or world_size < 1:
        raise InvalidSpecError(f"batch_size and world_size must be >= 1, got {batch_size} and {world_size}")
    per_step = batch_size * world_size
    full, rest = divmod(num_rows, per_step)
    sizes = [per_step] * full
    if rest and not drop_last:
        sizes.append(rest)
        if rest < world_size and full:
            total = per_step + rest  # two balanced steps, so no rank is left with an empty batch
            sizes[-2:] = [total - total // 2, total // 2]
    return sizes


def rank_slices(
    num_rows: int, batch_size: int, rank: int, world_size: int, drop_last: bool = False
) -> list[tuple[int, int]]:
    """``[start, stop)`` positions of the epoch order that ``rank`` takes, one pair per step."""
    slices = []
    offset = 0
    for size in step_layout(num_rows, batch_size, world_size, drop_last):
        base, extra = divmod(size, world_size)
        start = offset + rank * base + min(rank, extra)
        slices.append((start, start + base + (1 if rank < extra else 0)))
        offset += size
    return slices


def validation_mask(keys: pa.Array | pa.ChunkedArray, fraction: float, column: str = "key") -> np.ndarray:
    """True for rows whose key hashes below ``fraction``: a key keeps its split in every table version."""
    import numpy as np

    if not 0.0 <= fraction < 1.0:
        raise InvalidSpecError(f"validation_fraction must be in [0, 1), got {fraction!r}")
    if keys.null_count:
        raise SchemaMismatchError(f"split key column {column!r} has nulls: every row needs a stable key")
    threshold = int(fraction * 2**64)
    out = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8, key=SPLIT_SALT).digest(), "big")
            < threshold
            for k in keys.to_pylist()
        ),
        dtype=bool,
        count=len(keys),
    )
    return out


@dataclass(frozen=True)
class LoaderSpec:
    """What one rank's loader reads and how it deals the rows (picklable, for worker processes)."""

    plan: ScanPlan
    batch_size: int
    columns: tuple[str, ...]
    split: Split = None
    key: str | None = None
    validation_fraction: float = 0.2
    shuffle: bool = True
    drop_last: bool = False
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    mode: Mode = "auto"
    memory_budget_mb: float | None = None  # None: $DLTRAIN_LOADER_MEMORY_MB, else a quarter of RAM
    shuffle_buffer_mb: float = 256.0

    @property
    def buffer_bytes(self) -> int:
        """The streaming shuffle buffer's size in bytes."""
        return int(self.shuffle_buffer_mb * 2**20)

    @property
    def budget_bytes(self) -> int:
        """Bytes the in-memory mode may hold in this process."""
        if self.memory_budget_mb is not None:
            return int(self.memory_budget_mb * 2**20)
        if os.environ.get(MEMORY_BUDGET_ENV):
            return int(float(os.environ[MEMORY_BUDGET_ENV]) * 2**20)
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
