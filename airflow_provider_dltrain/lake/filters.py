"""Row filters on a pinned version: parse a JSON-able DNF and turn it into a pyarrow expression.

Filters are JSON-able DNF lists, as Airflow templates render them::

    [["ds", "<=", "2026-11-28"]]                         # one conjunction
    [[["ds", ">=", "2026-11-01"], ["label", "<", "5"]]]  # OR of conjunctions

Values are cast to the column's type (a rendered ``"5"`` compares as an integer on an int column).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

Predicate = tuple[str, str, Any]
DNF = tuple[tuple[Predicate, ...], ...]
DataFilter = Sequence[Any]

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}


def normalize_filter(data_filter: DataFilter | None) -> DNF:
    """Return ``data_filter`` as an OR of AND-ed ``(column, op, value)`` triples; raise naming a bad part."""
    if data_filter is None or (isinstance(data_filter, (list, tuple)) and len(data_filter) == 0):
        return ()
    if isinstance(data_filter, str):
        try:
            data_filter = json.loads(data_filter)
        except ValueError as err:
            raise InvalidSpecError(
                f'data_filter {data_filter!r:.200} is not JSON; pass e.g. [["ds", "<=", "2026-11-28"]]'
            ) from err
    if not isinstance(data_filter, (list, tuple)):
        raise InvalidSpecError(
            f"data_filter must be a list of [column, op, value] triples, got {data_filter!r:.200}"
        )
    first = data_filter[0]
    is_dnf = isinstance(first, (list, tuple)) and len(first) > 0 and isinstance(first[0], (list, tuple))
    conjunctions = data_filter if is_dnf else [data_filter]
    return tuple(tuple(_predicate(p) for p in conj) for conj in conjunctions)


def filter_columns(dnf: DNF) -> tuple[str, ...]:
    """The columns a normalised filter names, sorted."""
    return tuple(sorted({p[0] for conj in dnf for p in conj}))


def _predicate(item: Any) -> Predicate:
    if not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[0], str):
        raise InvalidSpecError(f"data_filter entry {item!r:.200} must be [column, op, value]")
    column, op, value = item
    op = str(op).strip().lower()
    if op not in _OPS:
        raise InvalidSpecError(f"data_filter on {column!r}: operator {op!r} is not one of {sorted(_OPS)}")
    if op in {"in", "not in"}:
        if not isinstance(value, (list, tuple)):
            raise InvalidSpecError(
                f"data_filter on {column!r}: {op!r} needs a list of values, got {value!r:.100}"
            )
        value = tuple(value)
    return (column, op, value)


def _cast(value: Any, dtype: pa.DataType, column: str) -> Any:
    import pyarrow as pa

    try:
        return pa.scalar(value).cast(dtype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise InvalidSpecError(
            f"data_filter on {column!r}: value {value!r:.100} cannot be compared with a {dtype} column"
        ) from err


def filter_expression(dnf: DNF, schema: pa.Schema) -> pads.Expression | None:
    """Translate a normalised filter into a pyarrow expression, checking every column exists."""
    import pyarrow.dataset as pads

    if not dnf:
        return None
    result = None
    for conj in dnf:
        term = None
        for column, op, value in conj:
            if schema.get_field_index(column) < 0:
                raise InvalidSpecError(
                    f"data_filter names column {column!r}, which the table lacks; columns: {schema.names}"
                )
            dtype = schema.field(column).type
            ref = pads.field(column)
            if op in {"in", "not in"}:
                import pyarrow as pa

                values = pa.array([_cast(v, dtype, column).as_py() for v in value], type=dtype)
                pred = ref.isin(values) if op == "in" else ~ref.isin(values)
            else:
                scalar = _cast(value, dtype, column)
                pred = {
                    "=": ref == scalar,
                    "==": ref == scalar,
                    "!=": ref != scalar,
                    "<": ref < scalar,
                    "<=": ref <= scalar,
                    ">": ref > scalar,
                    ">=": ref >= scalar,
                }[op]
            term = pred if term is None else term & pred
        result = term if result is None else result | term
    return result


def partition_expression(partition: tuple[tuple[str, str | None], ...], schema: pa.Schema) -> pads.Expression:
    """The expression a file's partition values satisfy (``column == value`` for each, typed)."""
    import pyarrow.dataset as pads

    expr = pads.scalar(True)
    for column, value in partition:
        ref = pads.field(column)
        if value is None:
            expr = expr & ref.is_null()
        else:
            expr = expr & (ref == _cast(value, schema.field(column).type, column))
    return expr
