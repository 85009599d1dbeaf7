"""Partition specs, and the dates and partition values they hold: checked at the door, never trimmed.

The one place for these rules. The Airflow operators apply them before any work starts (in
``__init__`` to literal values, in ``execute`` to every value once templates are rendered); the
engines apply them again before they read or write, since a cloud job receives its spec from
elsewhere. A value is never cleaned up: ``" 2026-11-28"`` would name another directory than
``"2026-11-28"``, so it is refused with the field, the value and what to do.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Collection, Mapping
from typing import Any, Literal, overload

from airflow_provider_dltrain.exceptions import InvalidPartitionError, InvalidSpecError

_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A partition value with no declared format: letters, digits, '-', '_', '.' and '+', starting with a
# letter or digit, at most 128 characters. Each refused character can break a partition directory:
# whitespace and control characters (invisible, trimmed by some tools and not by others), '/' and
# '\' (nested directories), '=' (Hive's column=value separator), ':' (Hadoop paths read it as a URI
# scheme), '*', '?', '[', ']', '{', '}' (glob patterns), '%' and '#' (escaped differently by Spark,
# delta-rs and S3), quotes and other punctuation (SQL syntax in a predicate).
_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+\-]{0,127}")
_VALUE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")
ALLOWED = "letters, digits and '-', '_', '.', '+' (starting with a letter or digit, at most 128)"
# A comparison bound (``ds <= D``) names no directory: ':' and single inner spaces may appear, as in
# timestamps ("2026-11-28T12:00", "2026-11-28 12:00:00"); nothing that is quoting or SQL syntax.
_BOUND = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:+\-]| (?! )){0,127}")
_BOUND_CHARS = _VALUE_CHARS | {":", " "}
BOUND_ALLOWED = "letters, digits, '-', '_', '.', ':', '+' and single spaces (starting with a letter or digit)"

DATE = "date"  # the one named partition format: YYYY-MM-DD, a real calendar date
FORMAT_NAMES = (DATE,)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# A date, or a full ISO timestamp (seconds required; optional fraction and offset or Z): nothing else.
_DATE_TEXT = re.compile(
    r"(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?)?"
)


class Partition(dict[str, str]):
    """A partition spec that passed :func:`validate_partition`: ``{column: value}`` strings, frozen.

    Validated once, where it enters (an operator, a hook, a job's spec); every later step that asks
    :func:`validate_partition` again gets it back as it is. It is a ``dict`` for everything that reads
    one (JSON, XCom, delta-rs filters, ``dict(...)``), but cannot be changed: build another with
    ``validate_partition({...})``.
    """

    __slots__ = ()

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a Partition is frozen: build another with validate_partition({...})")

    __setitem__ = __delitem__ = __ior__ = _frozen  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Partition, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __repr__(self) -> str:
        return dict.__repr__(self)


META_DIGEST = "dltrain.content_digest"  # digest of the partition's rows after the commit
META_PARTITION = "dltrain.partition"  # canonical JSON of the partition spec the commit replaced


def canonical_partition(partition: Mapping[str, object]) -> str:
    """The JSON stored under :data:`META_PARTITION`: keys sorted, no whitespace."""
    return json.dumps({str(k): v for k, v in partition.items()}, sort_keys=True, separators=(",", ":"))


def check_date(value: Any, field: str) -> str:
    """``YYYY-MM-DD`` for a date, a datetime or an ISO string; :class:`InvalidSpecError` otherwise.

    Strings must be exactly ``YYYY-MM-DD`` or a full ISO timestamp such as ``2026-11-28T00:00:00``,
    ``2026-11-28T00:00:00.123+00:00`` or ``...Z`` (as Airflow renders ``{{ ds }}`` and ``{{ ts }}``);
    anything around it (``'2026-11-28 junk'``, ``' 2026-11-28'``, ``'2026-11-28\\n'``) is refused,
    never trimmed. The date is the one written, not converted across time zones.
    """
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str) and (match := _DATE_TEXT.fullmatch(value)):
        try:
            if len(value) > 10:  # also rejects impossible times such as 25:00:00
                dt.datetime.fromisoformat(value)
            return dt.date.fromisoformat(match["day"]).isoformat()
        except ValueError:
            pass
    raise InvalidSpecError(
        f"{field}={value!r:.200} is not a date: pass 'YYYY-MM-DD' (e.g. '{{{{ ds }}}}') or a full "
        "ISO timestamp such as '2026-11-28T00:00:00+00:00', with nothing before or after it."
    )


def check_partition_formats(
    formats: Mapping[str, object] | None,
    *,
    columns: Collection[str] | None = None,
    field: str = "partition_formats",
) -> dict[str, str]:
    """``{column: format}`` with every format usable, or :class:`InvalidSpecError` naming the bad one.

    A format is ``"date"`` or a regular expression the whole value must match (e.g.
    ``r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}"``); the characters a partition value may never hold
    stay refused whatever the expression allows. With ``columns``, a format for another column is
    refused (a misspelt column would otherwise declare nothing).
    """
    if formats is None:
        return {}
    if not isinstance(formats, Mapping):
        raise InvalidSpecError(
            f"{field} must be a dict of partition column -> format, e.g. {{'ds': 'date'}}; "
            f"got {type(formats).__name__}"
        )
    result: dict[str, str] = {}
    for column, fmt in formats.items():
        if not isinstance(column, str) or not _COLUMN.match(column):
            raise InvalidSpecError(f"{field}: column name {column!r} is not a plain identifier")
        if columns is not None and column not in columns:
            raise InvalidSpecError(
                f"{field} declares a format for column {column!r}, which is not a partition column "
                f"(the partition has {sorted(columns)}); fix the column name"
            )
        if not isinstance(fmt, str) or not fmt:
            raise InvalidSpecError(
                f"{field}[{column!r}] = {fmt!r} is not a format: pass 'date' or a regular expression"
            )
        if fmt not in FORMAT_NAMES:
            if re.fullmatch(r"[A-Za-z_]+", fmt):  # a name, not a pattern: most likely a typo of one
                raise InvalidSpecError(
                    f"{field}[{column!r}] = {fmt!r} is not a known format name: use one of "
                    f"{list(FORMAT_NAMES)} or a regular expression"
                )
            try:
                re.compile(fmt)
            except re.error as err:
                raise InvalidSpecError(
                    f"{field}[{column!r}] = {fmt!r} is not a valid regular expression: {err}"
                ) from err
        result[column] = fmt
    return result


def _describe(fmt: str) -> str:
    if fmt == DATE:
        return "'date' (YYYY-MM-DD, a real calendar date)"
    return f"the regular expression {fmt!r} (matching the whole value)"


def _matches(text: str, fmt: str) -> bool:
    if fmt == DATE:
        if not _DAY.fullmatch(text):
            return False
        try:
            dt.date.fromisoformat(text)
        except ValueError:
            return False
        return True
    return re.fullmatch(fmt, text) is not None


def check_partition_value(
    column: str, value: object, fmt: str | None = None, *, field: str = "partition", bound: bool = False
) -> str:
    """The value as a string, or :class:`InvalidPartitionError` naming the column, the value and the rule.

    Refused: an empty value, leading or trailing whitespace or any control character (never
    trimmed), a value not matching the column's declared format, and any character outside
    :data:`ALLOWED` (:data:`BOUND_ALLOWED` for a comparison ``bound``, which names no directory).
    """
    where = f"{field}[{column!r}]"
    text = "" if value is None else str(value)
    if not text:
        raise InvalidPartitionError(
            f"{where} is empty or missing: a partition value is required (did a template render to an "
            "empty string?)"
        )
    if text != text.strip():
        raise InvalidPartitionError(
            f"{where} = {text!r} has leading or trailing whitespace; values are never trimmed "
            f"({text.strip()!r} would be another partition): fix the value or the template that rendered it"
        )
    control = next((c for c in text if not c.isprintable()), None)
    if control is not None:
        raise InvalidPartitionError(
            f"{where} = {text!r} contains the control character {control!r}; pass the value without it"
        )
    if fmt is not None and not _matches(text, fmt):
        raise InvalidPartitionError(
            f"{where} = {text!r} does not match the format declared for column {column!r}: {_describe(fmt)}"
        )
    if bound:
        if not _BOUND.fullmatch(text):
            bad = next((c for c in text if c not in _BOUND_CHARS), None)
            what = f"contains {bad!r}" if bad is not None else "is not allowed"
            raise InvalidPartitionError(f"{where} = {text!r:.200} {what} in a bound; use {BOUND_ALLOWED}")
    elif not _VALUE.fullmatch(text):
        bad = next((c for c in text if c not in _VALUE_CHARS), None)
        what = f"contains {bad!r}, which" if bad is not None else "is a value that"
        raise InvalidPartitionError(
            f"{where} = {text!r:.200} {what} cannot be in a partition directory name safely; use {ALLOWED}"
        )
    return text


@overload
def validate_partition(
    partition: Mapping[str, object] | None,
    *,
    field: str = ...,
    formats: Mapping[str, object] | None = ...,
    bounds: Literal[False] = ...,
) -> Partition: ...


@overload
def validate_partition(
    partition: Mapping[str, object] | None,
    *,
    field: str = ...,
    formats: Mapping[str, object] | None = ...,
    bounds: Literal[True],
) -> dict[str, str]: ...


def validate_partition(
    partition: Mapping[str, object] | None,
    *,
    field: str = "partition",
    formats: Mapping[str, object] | None = None,
    bounds: bool = False,
) -> dict[str, str]:
    """Return ``partition`` as a frozen :class:`Partition` of ``{column: value}`` strings (with
    ``bounds``: a plain dict) or raise naming what is wrong.

    Every value must pass :func:`check_partition_value`, with the format ``formats`` declares for
    its column (``{"ds": "date"}``); with ``bounds`` the values are upper bounds of a comparison,
    not partition names. An empty mapping or an empty value is refused: a write without a
    partition would replace the whole table.
    """
    if isinstance(partition, Partition) and not bounds and not formats:
        return partition  # validated where it entered
    if not partition:
        raise InvalidPartitionError(
            f"{field} is empty: pass e.g. {{'ds': '2026-11-28'}}; a write without a partition value "
            "would overwrite the whole table, which this provider never does"
        )
    if not isinstance(partition, Mapping):
        raise InvalidPartitionError(
            f"{field} must be a dict of column -> value, e.g. {{'ds': '2026-11-28'}}; got {type(partition).__name__}"
        )
    declared = check_partition_formats(formats, columns=[str(c) for c in partition])
    result: dict[str, str] = {}
    for column, value in partition.items():
        if not isinstance(column, str) or not _COLUMN.match(column):
            raise InvalidPartitionError(f"{field}: column name {column!r} is not a plain identifier")
        result[column] = check_partition_value(column, value, declared.get(column), field=field, bound=bounds)
    return result if bounds else Partition(result)  # bounds are no partition names


def predicate(partition: Mapping[str, str]) -> str:
    """SQL predicate selecting exactly ``partition`` (values validated, then quoted)."""
    partition = validate_partition(partition)
    return " AND ".join(f"\"{col}\" = '{val}'" for col, val in sorted(partition.items()))


def filters(partition: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """delta-rs/pyarrow DNF filter for exactly ``partition``."""
    return [(col, "=", val) for col, val in sorted(validate_partition(partition).items())]


def key(partition: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(validate_partition(partition).items()))


def path_of(partition: Mapping[str, str], partition_by: list[str]) -> str:
    """Hive-style relative directory (``ds=2026-11-28``) in ``partition_by`` order."""
    return "/".join(f"{col}={partition[col]}" for col in partition_by)
