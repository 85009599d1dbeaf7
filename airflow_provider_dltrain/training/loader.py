"""Delta version -> PyTorch batches: sharded, deterministically shuffled, split by a stable row key.

How rows are dealt out (same in every process, computed from the row count alone):

* rows are first put in content order: by the split ``key`` (ties by a hash of the row), or by
  what the rows hold when there is no key - never by file, so the same rows give the same batches
  whatever files hold them (see :mod:`.ordering`);
* the epoch order is ``arange(n)`` or a permutation seeded by ``(seed, epoch)`` - identical on
  every rank, independent of the world size;
* the order is cut into global steps of ``batch_size * world_size`` rows, and each step into one
  contiguous slice per rank, so ranks are disjoint, every row is used exactly once per epoch and
  every rank runs the same number of steps (DDP needs that, or the last all-reduce hangs). A
  remainder smaller than the world size is spread over the last two steps instead of leaving a
  rank with nothing (only with fewer rows than ranks, or ``batch_size=1``, can a rank still get an
  empty final batch). One rank's steps are dealt round-robin to its DataLoader workers.
* Because the global batches do not depend on the world size, N ranks with ``batch_size`` B see
  the same batches as one process with ``batch_size`` N*B.

Two modes (``LoaderSpec.mode``): ``"memory"`` reads the selection once per process and deals it
as above (a global shuffle); ``"stream"`` reads row groups through a bounded shuffle buffer
(:mod:`.stream`, memory bounded whatever the table size, order decided by the row groups' content);
``"auto"`` (the default) picks memory when the selected columns fit the memory budget.

Measured on 2 cores: the selected columns are read once per process into dense arrays
(Arrow -> numpy -> torch without per-row work), and each batch is one gather. Worker processes only
add pickling and IPC on top of that, so ``num_workers=0`` is the default and the fast path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.lake.tensors import column_to_numpy, is_tensor_type, to_tensor
from airflow_provider_dltrain.training.loader_spec import (
    Batch,
    LoaderSpec,
    Split,
    rank_slices,
    validation_mask,
)
from airflow_provider_dltrain.training.ordering import content_order, sample_keys
from airflow_provider_dltrain.training.stream import Unit, stream_batches, survey, unit_rows

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def selection_bytes(spec: LoaderSpec) -> int:
    """Decoded size of the selected columns of the plan's files, from the Parquet footers alone."""
    import pyarrow.parquet as pq

    from airflow_provider_dltrain.lake.storage import filesystem, join

    fs, root = filesystem(spec.plan.ref.uri, spec.plan.storage_options)
    wanted = set(spec.columns) | ({spec.key} if spec.key else set())

    def one(path: str) -> int:
        with fs.open_input_file(join(root, path)) as handle:
            meta = pq.ParquetFile(handle).metadata
        return sum(
            meta.row_group(g).column(c).total_uncompressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
            if meta.row_group(g).column(c).path_in_schema.split(".")[0] in wanted
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        return sum(pool.map(one, [f.path for f in spec.plan.files]))


def resolve_mode(spec: LoaderSpec) -> LoaderSpec:
    """``spec`` with ``mode`` "memory" or "stream": "auto" becomes memory when the selection fits the budget."""
    from dataclasses import replace

    if spec.mode not in ("auto", "memory", "stream"):
        raise InvalidSpecError(f"loader mode must be 'auto', 'memory' or 'stream', got {spec.mode!r}")
    if spec.shuffle_buffer_mb <= 0:
        raise InvalidSpecError(f"shuffle_buffer_mb must be > 0, got {spec.shuffle_buffer_mb!r}")
    if spec.mode != "auto":
        return spec
    return replace(spec, mode="memory" if selection_bytes(spec) <= spec.budget_bytes else "stream")


@dataclass
class _Loaded:
    arrays: dict[str, Any]  # column -> torch tensor (numbers) or numpy object array (strings)
    rows: dict[Split, np.ndarray]  # split -> positions in ``arrays``

    @property
    def nbytes(self) -> int:
        return sum(int(getattr(v, "nbytes", 0)) for v in self.arrays.values())

    @property
    def row_bytes(self) -> int:
        rows = len(next(iter(self.arrays.values()))) if self.arrays else 0
        return self.nbytes // rows if rows else 0


_CACHE: OrderedDict[tuple, _Loaded] = OrderedDict()
_SURVEYS: OrderedDict[tuple, tuple[Unit, ...]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 4


def _cache_key(spec: LoaderSpec) -> tuple:
    plan = spec.plan
    return (plan.ref, plan.files, plan.data_filter, spec.columns, spec.key, spec.validation_fraction)


def _load(spec: LoaderSpec) -> _Loaded:
    """Read the selected columns of the plan's files once per process (cached for later epochs and splits).

    The cache keeps at most 4 selections and, together, no more than the memory budget.
    """
    cache_key = _cache_key(spec)
    with _CACHE_LOCK:
        if cache_key in _CACHE:
            _CACHE.move_to_end(cache_key)
            return _CACHE[cache_key]
    loaded = _read(spec)
    with _CACHE_LOCK:
        _CACHE[cache_key] = loaded
        while len(_CACHE) > 1 and (
            len(_CACHE) > _CACHE_SIZE or sum(v.nbytes for v in _CACHE.values()) > spec.budget_bytes
        ):
            _CACHE.popitem(last=False)
    return loaded


def units_of(spec: LoaderSpec) -> tuple[Unit, ...]:
    """The streaming survey of the plan (row groups, digests, counts), once per process."""
    cache_key = _cache_key(spec)
    with _CACHE_LOCK:
        if cache_key in _SURVEYS:
            return _SURVEYS[cache_key]
    units = survey(spec)
    with _CACHE_LOCK:
        _SURVEYS[cache_key] = units
        while len(_SURVEYS) > 16:
            _SURVEYS.popitem(last=False)
    return units


def _read(spec: LoaderSpec) -> _Loaded:
    import numpy as np

    plan = spec.plan
    needed = list(dict.fromkeys([*spec.columns, *([spec.key] if spec.key else [])]))
    # deleted rows dropped, filter applied; the order of the rows does not matter (content order below)
    table = plan.read(needed)
    # Rows stay where the files put them; the positions lists are in content order instead. A batch
    # gathers the same rows in the same sequence as a content-sorted copy would, without the copy.
    # Without a key the rows' sample keys are found in two threads, each over half of the rows,
    # while this one turns the columns into tensors (all of it releases the GIL).
    with ThreadPoolExecutor(max_workers=2) as pool:
        halves = [] if spec.key else [pool.submit(sample_keys, part) for part in _halves(table)]
        arrays = {c: to_tensor(column_to_numpy(table.column(c), c)) for c in spec.columns}
        sample = np.concatenate([h.result() for h in halves]) if halves else None
    order = content_order(table, spec.key, sample).astype(np.int64, copy=False)  # torch indexes with int64
    rows: dict[Split, np.ndarray] = {None: order}
    if spec.key:
        is_val = validation_mask(table.column(spec.key), spec.validation_fraction, spec.key)[order]
        rows["validation"] = order[is_val]
        rows["train"] = order[~is_val]
    return _Loaded(arrays, rows)


_GATHER_BYTES = 8 * 2**20


def _halves(table: pa.Table) -> list[pa.Table]:
    middle = table.num_rows // 2
    return [table.slice(0, middle), table.slice(middle)]


def _views(loaded: _Loaded, rows: np.ndarray, group: list[tuple[int, int]]) -> Iterator[Batch]:
    """The batches of ``group`` (ranges of ``rows``, in order): one gather, then slices of it."""
    import numpy as np

    block = _gather(loaded, np.concatenate([rows[a:b] for a, b in group]))
    offset = 0
    for start, stop in group:
        size = stop - start
        yield {name: values[offset : offset + size] for name, values in block.items()}
        offset += size


def _gather(loaded: _Loaded, positions: np.ndarray) -> Batch:
    import torch

    index = torch.from_numpy(positions)
    return {
        name: (
            values.index_select(0, index) if isinstance(values, torch.Tensor) else values[positions].tolist()
        )
        for name, values in loaded.arrays.items()
    }


def iter_batches(
    spec: LoaderSpec,
    epoch: int,
    worker: int = 0,
    num_workers: int = 1,
    units: tuple[Unit, ...] | None = None,
) -> Iterator[Batch]:
    """Yield this rank's (and this worker's) batches of ``epoch`` as dicts of tensors."""
    import numpy as np

    spec = resolve_mode(spec)
    if spec.mode == "stream":
        yield from stream_batches(
            spec, units if units is not None else units_of(spec), epoch, worker, num_workers
        )
        return
    loaded = _load(spec)
    rows = loaded.rows[spec.split]
    if spec.shuffle:
        rows = rows[np.random.default_rng([spec.seed % 2**63, epoch]).permutation(len(rows))]
    slices = rank_slices(len(rows), spec.batch_size, spec.rank, spec.world_size, spec.drop_last)
    mine = [bounds for step, bounds in enumerate(slices) if step % num_workers == worker]
    # Many batches are gathered at once into one block (about _GATHER_BYTES) and handed out as views
    # of it: one index_select per column and block instead of per batch (the per-call overhead was
    # half of the gathers' time for 256-row batches); each batch still owns its own rows.
    per_block = max(1, _GATHER_BYTES // max(1, loaded.row_bytes))
    group: list[tuple[int, int]] = []
    held = 0
    for start, stop in mine:
        if group and held + stop - start > per_block:
            yield from _views(loaded, rows, group)
            group, held = [], 0
        group.append((start, stop))
        held += stop - start
    if group:
        yield from _views(loaded, rows, group)


def num_rows(spec: LoaderSpec) -> int:
    """Rows of the requested split (all ranks together) - reads the data (or surveys it) if not cached yet."""
    spec = resolve_mode(spec)
    if spec.mode == "stream":
        return sum(unit_rows(u, spec) for u in units_of(spec))
    return len(_load(spec).rows[spec.split])


class DeltaLoader:
    """Iterable over one rank's batches; each full pass is the next epoch (or call :meth:`set_epoch`).

    Batches are ``{column: tensor}``; equal-length list columns are dense ``(B, L, ...)`` tensors,
    string columns (only when asked for) are lists of ``str``.
    """

    def __init__(
        self,
        spec: LoaderSpec,
        num_workers: int = 0,
        multiprocessing_context: str | None = None,
        on_batch: Callable[[Batch, int], None] | None = None,
    ) -> None:
        self.spec = resolve_mode(spec)
        self.num_workers = num_workers
        self.multiprocessing_context = multiprocessing_context
        self.on_batch = on_batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` (seeding the shuffle) for the next pass."""
        self.epoch = epoch

    def __len__(self) -> int:
        s = self.spec
        return len(rank_slices(num_rows(s), s.batch_size, s.rank, s.world_size, s.drop_last))

    @property
    def num_rows(self) -> int:
        """Rows of this split across all ranks."""
        return num_rows(self.spec)

    def __iter__(self) -> Iterator[Batch]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        for batch in self._batches(epoch):
            if self.on_batch is not None:
                self.on_batch(batch, _batch_rows(batch))
            yield batch

    def _batches(self, epoch: int) -> Iterator[Batch]:
        if self.num_workers <= 0:
            return iter_batches(self.spec, epoch)
        import torch
        from torch.utils.data import DataLoader

        from airflow_provider_dltrain.training._worker_data import EpochBatches, seed_worker

        s = self.spec
        # torch draws the workers' base seed from this generator: fixed per (seed, epoch, rank)
        generator = torch.Generator().manual_seed(_mix(s.seed, epoch, s.rank))
        return iter(
            DataLoader(
                EpochBatches(iter_batches, s, epoch, units_of(s) if s.mode == "stream" else None),
                batch_size=None,
                num_workers=self.num_workers,
                multiprocessing_context=self.multiprocessing_context,
                worker_init_fn=seed_worker,
                generator=generator,
            )
        )


def _mix(*values: int) -> int:
    """A 63-bit seed from several integers (numpy's SeedSequence: well spread, stable across versions)."""
    import numpy as np

    return int(np.random.SeedSequence([v % 2**63 for v in values]).generate_state(2, np.uint64)[0] >> 1)


def _batch_rows(batch: Batch) -> int:
    for value in batch.values():
        return len(value)
    return 0


def default_columns(plan: ScanPlan, columns: Sequence[str] | None) -> tuple[str, ...]:
    """The requested columns (checked) or every numeric/list-of-numbers column of the table."""
    names = plan.schema.names
    if columns is None:
        picked = tuple(n for n in names if is_tensor_type(plan.schema.field(n).type))
        if not picked:
            raise InvalidSpecError(f"{plan.ref.uri} has no numeric columns; pass columns=[...] explicitly")
        return picked
    missing = [c for c in columns if c not in names]
    if missing:
        raise InvalidSpecError(
            f"columns {missing} are not in {plan.ref.uri} (version {plan.ref.version}); columns: {names}"
        )
    return tuple(columns)
