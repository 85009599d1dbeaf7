"""Row filters on a pinned version: parse a JSON-able DNF and turn it into a pyarrow expression.

Filters are JSON-able DNF lists, as Airflow templates render them::

    [["ds", "<=", "2026-11-28"]]                         # one conjunction
    [[["ds", ">=", "2026-11-01"], ["label", "<", "5"]]]  # OR of conjunctions

Values are cast to the column's type (a rendered ``"5"`` compares as an integer on an int column).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timezone
from decimal import Decimal
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


# -- partition values against a filter, without reading rows --------------------------------------
# Which partitions a filter can select, decided from the partition values a commit or snapshot records
# (``partitionValues``: text) and the partition columns' Delta types. Recovery of a cleaned log,
# lineage and the index fingerprints ask it. A value is compared in its column's type ("2" < "10" on
# an ``integer`` column); whatever cannot be decided exactly (a type or operator not handled here, a
# null, a filter value that does not convert) is "may select", never a wrong "no".

_INTEGER_TYPES = frozenset({"byte", "short", "integer", "long"})
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


class _Undecided(Exception):
    """A value that cannot be compared exactly in its column's type."""


def parse_partition_value(text: str, delta_type: str) -> Any:
    """A ``partitionValues`` text as the Python value of its Delta type (as delta-rs reads it back).

    ``integer``/``long``/``short``/``byte`` → int, ``date`` → date, ``timestamp`` → an aware datetime
    (text without an offset is UTC, as delta-rs writes it), ``timestamp_ntz`` → a naive datetime,
    ``decimal(p,s)`` → Decimal, ``boolean`` → bool, ``string`` → the text itself.

    :raises ValueError: the type is not one of these, or the text is not a value of it.
    """
    if delta_type == "string":
        return text
    if delta_type in _INTEGER_TYPES:
        if not _INTEGER_TEXT.fullmatch(text.strip()):
            raise ValueError(f"{text!r} is not an {delta_type}")
        return int(text)
    if delta_type == "date":
        return date.fromisoformat(text)
    if delta_type in ("timestamp", "timestamp_ntz"):
        return _timestamp(datetime.fromisoformat(text), delta_type)
    if delta_type.startswith("decimal("):
        try:
            return Decimal(text)
        except ArithmeticError as err:
            raise ValueError(f"{text!r} is not a {delta_type}") from err
    if delta_type == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise ValueError(f"partition values of type {delta_type!r} are not compared here")


def _timestamp(value: datetime, delta_type: str) -> datetime:
    if delta_type == "timestamp_ntz":
        if value.tzinfo is not None:
            raise ValueError(f"{value} has a time zone; a timestamp_ntz has none")
        return value
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _operand(value: Any, delta_type: str) -> Any:
    """A filter value as its column's type, as the reader casts it (``"5"`` on an int column is 5)."""
    try:
        if isinstance(value, str):
            return parse_partition_value(value, delta_type)
        if delta_type == "string":
            if isinstance(value, bool) or not isinstance(value, int):
                raise _Undecided
            return str(value)
        if delta_type in _INTEGER_TYPES and isinstance(value, int) and not isinstance(value, bool):
            return value
        if delta_type in _INTEGER_TYPES and isinstance(value, float) and value.is_integer():
            return int(value)
        if delta_type == "date" and isinstance(value, date) and not isinstance(value, datetime):
            return value
        if delta_type in ("timestamp", "timestamp_ntz") and isinstance(value, datetime):
            return _timestamp(value, delta_type)
        if (
            delta_type.startswith("decimal(")
            and isinstance(value, (Decimal, int))
            and not isinstance(value, bool)
        ):
            return Decimal(value)
        if delta_type == "boolean" and isinstance(value, bool):
            return value
    except ValueError as err:
        raise _Undecided from err
    raise _Undecided


def compare_partition_value(text: str | None, delta_type: str | None, op: str, value: Any) -> bool | None:
    """Whether a partition value (its log text) satisfies ``op value``, compared in ``delta_type``;
    None when that cannot be decided exactly (a null, an unknown type or operator, a value that does
    not convert to the type)."""
    if text is None or delta_type is None:
        return None
    try:
        own = parse_partition_value(text, delta_type)
        if op in ("in", "not in"):
            if not isinstance(value, (list, tuple, set, frozenset)):
                return None
            found = any(own == _operand(v, delta_type) for v in value)
            return found if op == "in" else not found
        if op not in _ORDER:
            return None
        return _ORDER[op](own, _operand(value, delta_type))
    except (_Undecided, ValueError, TypeError):
        return None


def partition_may_select(
    values: Mapping[str, str | None], data_filter: Any, types: Mapping[str, str] | None
) -> bool:
    """Whether a partition with these ``partitionValues`` can hold rows ``data_filter`` selects.

    ``data_filter`` is a DNF (JSON lists or delta-rs tuples, flat or nested); ``types`` maps each
    partition column to its Delta type (from the table's schema). False only when every conjunction
    has a predicate on a partition column that is proven false in the column's type; a predicate on
    another column, or one :func:`compare_partition_value` cannot decide, may select.
    """
    try:
        dnf = normalize_filter(data_filter)
    except InvalidSpecError:
        return True  # not a filter this module reads: the reader refuses it, naming the part
    return dnf_may_select(values, dnf, types)


def dnf_may_select(values: Mapping[str, str | None], dnf: Any, types: Mapping[str, str] | None) -> bool:
    """:func:`partition_may_select` for a filter :func:`normalize_filter` already normalised (a loop over
    many partitions normalises it once)."""
    if not dnf:
        return True
    known = types or {}
    for conj in dnf:
        if all(
            column not in values
            or compare_partition_value(values[column], known.get(column), op, value) is not False
            for column, op, value in conj
        ):
            return True
    return False


def dnf_selector(dnf: Any, types: Mapping[str, str] | None) -> Callable[[Mapping[str, str | None]], bool]:
    """``dnf_may_select(values, dnf, types)`` as a function of ``values``, for a loop over many partitions:
    each filter value is converted to its column's type once, and each partition value parsed once.
    Decides exactly as :func:`compare_partition_value` does, term by term (``tests/lake`` checks the two
    agree on generated filters and partitions)."""
    if not dnf:
        return lambda _values: True
    known = types or {}
    conjunctions = [
        [(column, _term(op, value, known.get(column))) for column, op, value in conj] for conj in dnf
    ]

    def select(values: Mapping[str, str | None]) -> bool:
        return any(
            all(column not in values or term(values[column]) is not False for column, term in conj)
            for conj in conjunctions
        )

    return select


_UNDECIDED = object()


class _Parsed:
    """Partition value texts of one column, each parsed once (``_UNDECIDED``: not a value of the type)."""

    def __init__(self, delta_type: str) -> None:
        self.delta_type, self.values = delta_type, dict[str, Any]()

    def __call__(self, text: str) -> Any:
        if text not in self.values:
            try:
                self.values[text] = parse_partition_value(text, self.delta_type)
            except (ValueError, TypeError):
                self.values[text] = _UNDECIDED
        return self.values[text]

    def operand(self, value: Any) -> Any:
        try:
            return _operand(value, self.delta_type)
        except (_Undecided, ValueError, TypeError):
            return _UNDECIDED


def compiled_term(op: str, value: Any, delta_type: str | None) -> Callable[[str | None], bool | None]:
    """``compare_partition_value(text, delta_type, op, value)`` as a function of ``text`` (the value
    converted once), for a loop over many partitions."""
    return _term(op, value, delta_type)


def _term(op: str, value: Any, delta_type: str | None) -> Callable[[str | None], bool | None]:
    """``compare_partition_value(text, delta_type, op, value)`` as a function of ``text``."""
    if delta_type is None:
        return lambda _text: None
    own = _Parsed(delta_type)
    if op in ("in", "not in"):
        if not isinstance(value, (list, tuple, set, frozenset)):
            return lambda _text: None
        return _member_term(own, [own.operand(v) for v in value], op == "in")
    if op not in _ORDER:
        return lambda _text: None
    compare, other = _ORDER[op], own.operand(value)

    def ordered(text: str | None) -> bool | None:
        if text is None or (mine := own(text)) is _UNDECIDED or other is _UNDECIDED:
            return None
        try:
            return compare(mine, other)
        except TypeError:
            return None

    return ordered


def _member_term(own: _Parsed, operands: list[Any], member: bool) -> Callable[[str | None], bool | None]:
    """``in`` (``member``) or ``not in``: the operands compared in order, as ``any()`` would."""

    def check(text: str | None) -> bool | None:
        if text is None or (mine := own(text)) is _UNDECIDED:
            return None
        try:
            for other in operands:
                if other is _UNDECIDED:
                    return None
                if mine == other:
                    return member
        except TypeError:
            return None
        return not member

    return check


def partition_types(schema_json: str | None, partition_columns: Sequence[str]) -> dict[str, str] | None:
    """``{partition column: Delta type}`` from a Delta schema string (``metaData.schemaString``, or
    ``DeltaTable.schema().to_json()``); None when it cannot be read or lacks a partition column."""
    try:
        fields = {f["name"]: f["type"] for f in json.loads(schema_json or "{}")["fields"]}
        return {c: str(fields[c]) for c in partition_columns}
    except (ValueError, KeyError, TypeError):
        return None
