"""Streaming mode of the loader: one rank's batches with memory bounded by a shuffle buffer.

How an epoch is streamed (every process computes the same layout from the survey alone):

* the unit of work is one Parquet row group of the pinned version's selected files. A survey
  (once per process, reading only the split key, or the loaded columns when there is no key)
  records each unit's selected row counts and a **content digest** of its rows;
* units are sorted by digest, never by path, then permuted by ``(seed, epoch)``; inside a unit the
  rows are put in content order (:mod:`.ordering`) - so the global row sequence of an epoch
  depends on the seed and on what each row group holds, not on file names;
* the global sequence is cut into one contiguous range per rank (and per DataLoader worker), sized
  by the same step layout as the in-memory mode: ranks read disjoint row groups (a boundary group
  is read by two, each taking its own rows), every row is used exactly once per epoch and every
  rank runs the same number of steps;
* a prefetch thread reads the next units while the caller trains; rows go through a shuffle
  buffer of ``buffer_bytes`` (Arrow bytes): when it is full it is permuted (seeded by seed, epoch,
  rank, worker) and all but half of it is dealt out as batches, which are views of one gathered
  block. Peak memory is about the buffer plus the units in flight (one prefetched, one being read).

What this guarantees, against the in-memory global shuffle: the same seed and the same row groups
(rows rewritten into files of other names, in another order inside a group) give the same batches;
a rewrite that regroups rows (a compaction, another row-group size) changes the order rows are
seen in - not which rows - and so changes the weights. Batches also depend on the world size and
the number of DataLoader workers (the in-memory mode depends on neither).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.lake.scan_plan import ScanPlan
from airflow_provider_dltrain.lake.tensors import column_to_numpy, to_tensor

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_dltrain.training.loader_spec import Batch, LoaderSpec

_PREFETCH = 1  # units read ahead by the prefetch thread (each costs memory)


@dataclass(frozen=True)
class Unit:
    """One row group of one selected file: where it is, what it holds (digest), how many rows."""

    file: int  # index into ``plan.files``
    row_group: int
    digest: str
    rows: int  # selected rows (after the data filter)
    train: int  # of which in the train split (0 without a split key)


def needed_columns(spec: LoaderSpec) -> list[str]:
    """Columns a unit is read with: the loaded ones and the split key."""
    return list(dict.fromkeys([*spec.columns, *([spec.key] if spec.key else [])]))


def memory_pool() -> pa.MemoryPool:
    """jemalloc when pyarrow has it, else the default pool.

    Streaming allocates and frees a row group after another. Measured here (24 MB streamed through
    a 2 MB buffer, peak RSS growth): mimalloc, pyarrow's default, keeps the freed pages and grows
    by 13.6 MB, the system allocator by 12.9 MB, jemalloc (which hands them back) by 3.3 MB.
    """
    import pyarrow as pa

    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:
        return pa.default_memory_pool()


def read_unit(plan: ScanPlan, unit_file: int, row_group: int, columns: list[str]) -> pa.Table:
    """The selected rows of one row group (deleted rows dropped), ``columns`` only."""
    return plan.read_row_group(unit_file, row_group, columns, memory_pool())


def _survey_one(spec: LoaderSpec, index: int, row_group: int) -> Unit:
    import numpy as np

    from airflow_provider_dltrain.lake.row_hash import row_hashes
    from airflow_provider_dltrain.training.loader_spec import validation_mask

    columns = [spec.key] if spec.key else needed_columns(spec)
    table = read_unit(spec.plan, index, row_group, columns)
    hashes = np.sort(row_hashes(table))  # sorted: the digest ignores the order inside the group
    digest = hashlib.blake2b(hashes.tobytes(), digest_size=16).hexdigest()
    train = 0
    if spec.key:
        train = int((~validation_mask(table.column(spec.key), spec.validation_fraction, spec.key)).sum())
    return Unit(index, row_group, digest, table.num_rows, train)


def survey(spec: LoaderSpec) -> tuple[Unit, ...]:
    """Every non-empty unit of the plan, sorted by content digest (ties: identical contents)."""
    plan = spec.plan
    with ThreadPoolExecutor(max_workers=2) as pool:
        groups = list(pool.map(plan.row_groups, range(len(plan.files))))
        pairs = [(i, g) for i, ids in enumerate(groups) for g in ids]
        units = list(pool.map(lambda p: _survey_one(spec, *p), pairs))
    return tuple(sorted((u for u in units if u.rows), key=lambda u: (u.digest, u.rows)))


def unit_rows(unit: Unit, spec: LoaderSpec) -> int:
    """Rows of ``unit`` in the requested split."""
    if spec.split == "train":
        return unit.train
    if spec.split == "validation":
        return unit.rows - unit.train
    return unit.rows


def worker_range(spec: LoaderSpec, total: int, worker: int, num_workers: int) -> tuple[int, int, list[int]]:
    """``[start, stop)`` of the epoch's global row sequence this rank's worker streams, and its batch sizes."""
    from airflow_provider_dltrain.training.loader_spec import rank_slices

    per_rank = [
        [
            stop - start
            for start, stop in rank_slices(total, spec.batch_size, r, spec.world_size, spec.drop_last)
        ]
        for r in range(spec.world_size)
    ]
    start = sum(sum(sizes) for sizes in per_rank[: spec.rank])
    mine = per_rank[spec.rank]
    start += sum(sum(mine[w::num_workers]) for w in range(worker))
    sizes = mine[worker::num_workers]
    return start, start + sum(sizes), sizes


def _epoch_units(spec: LoaderSpec, units: tuple[Unit, ...], epoch: int) -> list[Unit]:
    import numpy as np

    if not spec.shuffle:
        return list(units)
    order = np.random.default_rng([spec.seed % 2**63, epoch, 1]).permutation(len(units))
    return [units[i] for i in order]


def _pieces(spec: LoaderSpec, units: list[Unit], start: int, stop: int) -> Iterator[tuple[Unit, int, int]]:
    """Units overlapping ``[start, stop)`` of the sequence, with the slice of their rows to take."""
    offset = 0
    for unit in units:
        count = unit_rows(unit, spec)
        lo, hi = max(start, offset), min(stop, offset + count)
        if lo < hi:
            yield unit, lo - offset, hi - offset
        offset += count
        if offset >= stop:
            return


def load_piece(spec: LoaderSpec, unit: Unit, lo: int, hi: int) -> tuple[dict[str, Any], int]:
    """Rows ``[lo, hi)`` of ``unit``'s split in content order, as loader arrays, and their Arrow bytes."""
    import numpy as np

    from airflow_provider_dltrain.training.loader_spec import validation_mask
    from airflow_provider_dltrain.training.ordering import content_order

    table = read_unit(spec.plan, unit.file, unit.row_group, needed_columns(spec))
    order = content_order(table, spec.key)
    if spec.split is not None:
        is_val = validation_mask(table.column(spec.key), spec.validation_fraction, str(spec.key))[order]
        order = order[is_val] if spec.split == "validation" else order[~is_val]
    import pyarrow.compute as pc

    taken = pc.take(table.select(list(spec.columns)), np.asarray(order[lo:hi]), memory_pool=memory_pool())
    del table
    arrays = {c: to_tensor(column_to_numpy(taken.column(c), c)) for c in spec.columns}
    return arrays, taken.nbytes


class _Prefetch:
    """A daemon thread reading pieces ahead into a small queue; errors re-raise in the consumer."""

    _END = object()

    def __init__(self, spec: LoaderSpec, pieces: Iterator[tuple[Unit, int, int]]) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=_PREFETCH)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(spec, pieces), daemon=True)
        self.thread.start()

    def _run(self, spec: LoaderSpec, pieces: Iterator[tuple[Unit, int, int]]) -> None:
        try:
            for piece in pieces:
                if not self._put(load_piece(spec, *piece)):
                    return
            self._put(self._END)
        except BaseException as err:  # handed to the consumer, which raises it
            self._put(err)

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[dict[str, Any], int]]:
        try:
            while (item := self.queue.get()) is not self._END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.stop.set()


def _block(like: Any, rows: int) -> Any:
    """An uninitialised tensor of ``rows`` rows shaped and typed like ``like``, in the stream's pool.

    The buffer's blocks (concatenations, gathers) are allocated and freed one after another, a few MB
    each. glibc's malloc, where torch allocates, raises its mmap threshold to the size of the first
    such block freed and from then on keeps freed blocks in its heap: measured here (64 MB through a
    4 MB buffer), the stream's peak RSS grew 12.0 MB with torch's allocator and 7.0 MB with glibc's
    threshold pinned. So the blocks live in Arrow buffers of :func:`memory_pool` (jemalloc returns
    them), viewed as tensors; torch writes into them through ``out=``.
    """
    import numpy as np
    import pyarrow as pa
    import torch

    shape = (rows, *like.shape[1:])
    nbytes = int(np.prod(shape, dtype=np.int64)) * like.element_size()
    buffer = pa.allocate_buffer(nbytes, memory_pool=memory_pool())
    raw = torch.frombuffer(buffer, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
    return raw.view(like.dtype).view(shape)


def _concat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np
    import torch

    if len(chunks) == 1:
        return chunks[0]
    out: dict[str, Any] = {}
    for name, first in chunks[0].items():
        parts = [c[name] for c in chunks]
        if isinstance(first, torch.Tensor):
            out[name] = torch.cat(parts, out=_block(first, sum(len(p) for p in parts)))
        else:
            out[name] = np.concatenate(parts)
    return out


def _take(arrays: dict[str, Any], positions: np.ndarray) -> dict[str, Any]:
    import torch

    index = torch.from_numpy(positions)
    return {
        n: torch.index_select(v, 0, index, out=_block(v, len(positions)))
        if isinstance(v, torch.Tensor)
        else v[positions]
        for n, v in arrays.items()
    }


def _rows(arrays: dict[str, Any]) -> int:
    return len(next(iter(arrays.values()))) if arrays else 0


class ShuffleBuffer:
    """Rows in, shuffled blocks out, within ``capacity`` Arrow bytes (plus the piece being added).

    Rows are mixed in a window of half the capacity: when that much is held it is permuted, half of it dealt out
    as one gathered block, the other half kept to mix with what comes next. The
    gather needs as much again, so the buffer never holds more than ``capacity`` (plus one piece).
    ``peak`` is the most bytes it held at once (buffer accounting, checked by the tests).
    """

    def __init__(self, capacity: int, rng: Any) -> None:
        self.window, self.rng = max(1, capacity // 2), rng
        self.chunks: list[dict[str, Any]] = []
        self.held = self.peak = self.rows = 0

    def add(self, arrays: dict[str, Any], nbytes: int) -> Iterator[dict[str, Any]]:
        """Add one piece; when the window is full, yield a shuffled block."""
        self.chunks.append(arrays)
        self.held += nbytes
        self.rows += _rows(arrays)
        if self.held >= self.window:
            yield from self._drain(int(self.rows * (self.window / 2) / self.held))

    def flush(self) -> Iterator[dict[str, Any]]:
        """Yield everything left, shuffled."""
        yield from self._drain(0)

    def _drain(self, keep: int) -> Iterator[dict[str, Any]]:
        if not self.rows:
            return
        pool, self.chunks = _concat(self.chunks), []
        self.peak = max(self.peak, 2 * self.held)  # the pool and its gathered copy
        per_row, rows = self.held / self.rows, self.rows
        if self.rng is None:  # no shuffle: rows pass through in sequence
            self.held = self.rows = 0
            yield pool
            return
        order = self.rng.permutation(rows)
        block = _take(pool, order[: rows - keep])
        if keep:
            self.chunks = [_take(pool, order[rows - keep :])]
        self.rows, self.held = keep, int(keep * per_row)
        del pool
        yield block


def _slice(arrays: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    return {n: v[start:stop] for n, v in arrays.items()}


def _cut(blocks: Iterator[dict[str, Any]], sizes: list[int]) -> Iterator[Batch]:
    """Batches of exactly ``sizes`` rows, as views of the blocks (strings as lists of ``str``)."""
    import torch

    def out(batch: dict[str, Any]) -> Batch:
        return {n: v if isinstance(v, torch.Tensor) else v.tolist() for n, v in batch.items()}

    carry: dict[str, Any] | None = None  # the start of the next batch (fewer rows than it needs)
    block: dict[str, Any] = {}
    step = 0
    for block in blocks:
        pos, count = 0, _rows(block)
        if carry is not None and step < len(sizes):
            # complete the carried batch with the head of this block only: copying the whole block
            # behind the carry would cost a block's memory and time
            need = sizes[step] - _rows(carry)
            carry = _concat([carry, _slice(block, 0, need)])
            pos = min(need, count)
            if _rows(carry) < sizes[step]:
                continue
            yield out(carry)
            step += 1
        carry = None
        while step < len(sizes) and count - pos >= sizes[step]:
            yield out(_slice(block, pos, pos + sizes[step]))
            pos += sizes[step]
            step += 1
        if pos < count:
            carry = _slice(block, pos, count)
    while step < len(sizes) and sizes[step] == 0:  # an empty last batch (fewer rows than ranks)
        yield {n: v[:0] if isinstance(v, torch.Tensor) else [] for n, v in block.items()}
        step += 1


def stream_batches(
    spec: LoaderSpec, units: tuple[Unit, ...], epoch: int, worker: int = 0, num_workers: int = 1
) -> Iterator[Batch]:
    """Yield this rank's (and this worker's) batches of ``epoch``, streamed through the buffer."""
    import numpy as np

    total = sum(unit_rows(u, spec) for u in units)
    start, stop, sizes = worker_range(spec, total, worker, num_workers)
    rng = np.random.default_rng([spec.seed % 2**63, epoch, spec.rank, worker, 2]) if spec.shuffle else None
    buffer = ShuffleBuffer(spec.buffer_bytes, rng)

    def blocks() -> Iterator[dict[str, Any]]:
        for arrays, nbytes in _Prefetch(spec, _pieces(spec, _epoch_units(spec, units, epoch), start, stop)):
            yield from buffer.add(arrays, nbytes)
        yield from buffer.flush()

    yield from _cut(blocks(), sizes)
