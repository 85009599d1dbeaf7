"""Arrow columns to dense torch tensors, a whole column at a time (never row by row)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import SchemaMismatchError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def is_tensor_type(dtype: pa.DataType) -> bool:
    """Whether a column of this type becomes a tensor (numbers, booleans, and lists of them)."""
    import pyarrow as pa

    while _is_list(dtype):
        dtype = dtype.value_type
    return bool(pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype))


def _is_list(dtype: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype)
    )


def column_to_numpy(column: pa.ChunkedArray | pa.Array, name: str) -> np.ndarray:
    """A dense array: ``(N,)`` for scalars, ``(N, L, ...)`` for equal-length (nested) lists.

    Strings and other non-numeric types become object arrays (yielded as Python lists per batch).
    Raises :class:`SchemaMismatchError` naming the column and row for nulls or ragged lists.
    """
    import pyarrow as pa

    array = column
    if isinstance(column, pa.ChunkedArray):  # combine_chunks copies even a single chunk
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not is_tensor_type(array.type):
        return array.to_numpy(zero_copy_only=False)
    return _dense(array, name, (len(array),))


def _dense(array: pa.Array, name: str, shape: tuple[int, ...]) -> np.ndarray:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if array.null_count:
        row = pc.index(pc.is_null(array), True).as_py()
        raise SchemaMismatchError(
            f"column {name!r} has a null at position {row} (of the flattened values): tensors cannot hold "
            "nulls; fill or filter them in the ETL step"
        )
    if not _is_list(array.type):
        # zero-copy for numbers without nulls; booleans are bit-packed in Arrow and get copied
        return np.asarray(array.to_numpy(zero_copy_only=False)).reshape(shape)
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
    else:
        lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if len(lengths) else 0
        ragged = np.flatnonzero(lengths != width)
        if len(ragged):
            raise SchemaMismatchError(
                f"column {name!r} holds lists of different lengths (row {int(ragged[0])} has "
                f"{int(lengths[ragged[0]])}, row 0 has {width}); only equal-length lists become dense tensors"
            )
    return _dense(array.flatten(), name, (*shape, width))


def to_tensor(values: np.ndarray) -> Any:
    """A torch tensor sharing memory with ``values``; object arrays (strings) stay numpy.

    Arrow buffers are read-only. The loader only ever gathers rows out of these tensors into new
    ones, never writes to them or hands them out, so sharing instead of copying is safe here.
    """
    import warnings

    import numpy as np
    import torch

    if values.dtype == object:
        return values
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(values))
