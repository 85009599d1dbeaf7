"""Partition specs: validated values and predicates that cannot be widened by their input."""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_provider_dltrain.exceptions import InvalidPartitionError

_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Letters, digits and the separators dates, times and ids use. No quote, backslash, '=', '/',
# whitespace other than a single space, or SQL syntax can get through.
_VALUE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:+\-]| (?! )){0,127}$")

Partition = dict[str, str]


def validate_partition(partition: Mapping[str, object] | None, *, field: str = "partition") -> Partition:
    """Return ``partition`` as ``{column: value}`` strings or raise naming what is wrong.

    An empty mapping or an empty value is refused: a write without a partition would replace the
    whole table.
    """
    if not partition:
        raise InvalidPartitionError(
            f"{field} is empty: pass e.g. {{'ds': '2026-11-28'}}; a write without a partition value "
            "would overwrite the whole table, which this provider never does"
        )
    result: Partition = {}
    for column, value in partition.items():
        if not isinstance(column, str) or not _COLUMN.match(column):
            raise InvalidPartitionError(f"{field}: column name {column!r} is not a plain identifier")
        text = "" if value is None else str(value).strip()
        if not text:
            raise InvalidPartitionError(
                f"{field}[{column!r}] is empty or missing: a partition value is required "
                "(did a template render to an empty string?)"
            )
        if not _VALUE.match(text):
            raise InvalidPartitionError(
                f"{field}[{column!r}] = {text!r} contains characters not allowed in a partition value; "
                "use letters, digits and '-', '_', '.', ':', '+'"
            )
        result[column] = text
    return result


def predicate(partition: Partition) -> str:
    """SQL predicate selecting exactly ``partition`` (values validated, then quoted)."""
    partition = validate_partition(partition)
    return " AND ".join(f"\"{col}\" = '{val}'" for col, val in sorted(partition.items()))


def filters(partition: Partition) -> list[tuple[str, str, str]]:
    """delta-rs/pyarrow DNF filter for exactly ``partition``."""
    return [(col, "=", val) for col, val in sorted(validate_partition(partition).items())]


def key(partition: Partition) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(validate_partition(partition).items()))


def path_of(partition: Partition, partition_by: list[str]) -> str:
    """Hive-style relative directory (``ds=2026-11-28``) in ``partition_by`` order."""
    return "/".join(f"{col}={partition[col]}" for col in partition_by)
