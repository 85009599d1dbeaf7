"""The content order of a table's rows: decided by what the rows hold, never by where they are stored.

The seeded shuffle permutes positions, so the rows must first sit in an order that depends on the
rows only: the same rows stored in other files, in another order (a compaction, a rewrite of the
same partition) then give the same batches, the same weights and the same metrics.

Sorting by the full 64-bit hash of every row (:func:`~airflow_provider_dltrain.lake.row_hash.row_hashes`)
gives such an order, but touches every byte of every row: on 2 cores it cost as much as reading the
Parquet files. The order here is the same kind of function of the content, computed in two steps:

1. a **sample key** per row: the full value hash of every scalar column, and of each equal-length
   tensor column a window of one cache line (64 bytes in the middle of the row) - so hashing reads one
   cache line per row instead of the whole tensor;
2. rows whose sample keys tie (rows alike in the window, or every row of a table of strings) are
   ordered among themselves by their full row hash, so the order is still total over everything
   loaded. Rows equal in every column may swap places, which changes nothing a model can see.

Floats are compared by value in the window as in the row hash: -0.0 is +0.0 and every NaN is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dltrain.exceptions import SchemaMismatchError
from airflow_provider_dltrain.lake.row_hash import (
    _blake64,
    _column_hash,
    _fmix,
    _is_fixed,
    _mix,
    _position_keys,
    row_hashes,
)
from airflow_provider_dltrain.lake.tensors import to_tensor

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_WINDOW_BYTES = 64  # one cache line of each row's tensor
_SAMPLE_SEED = 0x1F83D9ABFB41BD6B
_WIDTH_SEED = 0x5BE0CD19137E2179


def content_order(table: pa.Table, key: str | None = None, sample: np.ndarray | None = None) -> np.ndarray:
    """Positions ordering ``table``'s rows by ``key`` (ties by row content), or by row content alone.

    ``sample``: the rows' :func:`sample_keys` when the caller has them already (keyless order only).
    """
    import numpy as np

    if table.num_rows == 0:
        return np.arange(0)
    if key is None:
        # Sort the keys with each row's position packed into their low bits: a plain sort of
        # distinct integers, measured 2.5x faster than an argsort. Truncated keys that tie are
        # ordered by content below, as equal keys would be, so the packing changes no order.
        rows = table.num_rows
        bits = max(1, (rows - 1).bit_length())
        low = np.uint64((1 << bits) - 1)
        keys = sample_keys(table) if sample is None else sample
        packed = _sorted((keys & ~low) | np.arange(rows, dtype=np.uint64))
        return _order_ties(table, (packed & low).astype(np.int64), packed >> np.uint64(bits))
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = table.column(key)
    try:
        if pc.count_distinct(keys).as_py() == table.num_rows:  # unique keys: no tie to break, no hashing
            return np.asarray(pc.sort_indices(keys))  # Arrow's sort is stable
        ranked = pa.table({"key": keys, "row": pa.array(row_hashes(table), pa.uint64())})
        return np.asarray(pc.sort_indices(ranked, sort_keys=[("key", "ascending"), ("row", "ascending")]))
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise SchemaMismatchError(
            f"split key column {key!r} has type {keys.type}, which cannot be sorted; "
            "use a string, number or date column as the key"
        ) from err


_SIGN = 1 << 63


def _sorted(values: np.ndarray) -> np.ndarray:
    """``values`` (distinct uint64) in ascending order: torch's sort when torch is there, else numpy's.

    Distinct values have one sorted order, whatever the algorithm; torch's CPU sort (a radix sort for
    integers) measured 5x faster than numpy's quicksort on 300,000 keys. torch has no uint64: the top
    bit is flipped so that the int64 order is the unsigned one.
    """
    import numpy as np

    try:
        import torch
    except ImportError:
        return np.sort(values)
    signed = torch.from_numpy((values ^ np.uint64(_SIGN)).view(np.int64))
    return torch.sort(signed).values.numpy().view(np.uint64) ^ np.uint64(_SIGN)


def sample_keys(table: pa.Table) -> np.ndarray:
    """One uint64 per row from its scalar columns and a window of each tensor column (step 1 above).

    Columns of other types (strings, structs, ragged lists) add nothing here; the full row hash
    orders rows that tie without them.
    """
    import numpy as np

    keys = np.full(table.num_rows, _SAMPLE_SEED, dtype=np.uint64)
    for name in sorted(table.schema.names):
        part = _sample_column(table.column(name))
        if part is not None:
            keys = _mix(keys ^ _fmix(part ^ np.uint64(_blake64(name.encode("utf-8")))))
    return keys


def _order_ties(table: pa.Table, order: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """``order`` with every run of equal sample keys sorted by the full row hash (step 2 above)."""
    import numpy as np

    same = sorted_keys[1:] == sorted_keys[:-1]
    if not same.any():
        return order
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    slots = np.flatnonzero(tied)  # runs of equal keys, in key order
    rows = order[slots]
    # hash only the tied rows, unless most rows tie (a take would then copy nearly the whole table)
    full = row_hashes(table)[rows] if 2 * len(rows) > len(order) else row_hashes(table.take(rows))
    order[slots] = rows[np.lexsort((full, sorted_keys[slots]))]
    return order


def _sample_column(column: pa.ChunkedArray) -> np.ndarray | None:
    import numpy as np

    if _is_fixed(column.type):
        return _column_hash(column)  # one word per row: hash it whole
    parts = []
    for chunk in column.chunks:
        part = _window_hash(chunk)
        if part is None:
            return None
        parts.append(part)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _window_hash(chunk: pa.Array) -> np.ndarray | None:
    """A hash of the central 64 bytes of each row of an equal-length list of numbers without nulls."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import torch

    t = chunk.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return None
    if not (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)) or chunk.null_count:
        return None
    rows = len(chunk)
    if pa.types.is_fixed_size_list(t):
        width = t.list_size
    else:
        lengths = pc.list_value_length(chunk).to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if rows else 0
        if rows and (lengths != width).any():
            return None
    values = chunk.flatten()  # respects the chunk's offset
    if values.null_count:
        return None
    dense = values.to_numpy(zero_copy_only=False).reshape(rows, width)
    size = dense.dtype.itemsize
    span = min(width, max(1, _WINDOW_BYTES // size))
    # the cache line at the middle of the row (one line per row when rows are line-aligned)
    start = min(width - span, (width * size // 2) // _WINDOW_BYTES * _WINDOW_BYTES // size)
    if dense.dtype.kind == "f":
        # torch copies a strided window about twice as fast as NumPy (the tensor shares the Arrow
        # buffer, which nothing writes to; the copy is ours). -0.0 is found by its bits, not by
        # float arithmetic, which a flush-denormals mode would change.
        copy = to_tensor(dense)[:, start : start + span].contiguous()
        bits = copy.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
        sign_bit = torch.iinfo(bits.dtype).min  # -0.0's pattern: the sign bit alone
        # two reductions find either case without a mask (max propagates NaN; -0.0 is the least
        # integer); both are rare, so the masks are built only when one is there
        if copy.numel() and (int(bits.min()) == sign_bit or bool(torch.isnan(copy.max()))):
            bits[bits == sign_bit] = 0
            copy[torch.isnan(copy)] = float("nan")  # one NaN pattern, whatever the sign or payload
        window = copy.numpy()
    else:
        window = np.ascontiguousarray(dense[:, start : start + span])
    # 8 bytes at a time when the window allows it: no widening copy
    words = window.view(np.uint64) if (span * size) % 8 == 0 else window.view(f"u{size}").astype(np.uint64)
    hashes = words @ _position_keys(words.shape[1])  # wraps mod 2**64, as a hash should
    return _mix(hashes ^ np.uint64(_WIDTH_SEED + width))
