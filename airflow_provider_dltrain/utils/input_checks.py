"""Refuse an operator's bad dates and partition values before it does any work (Airflow layer).

The rules live in :mod:`airflow_provider_dltrain.lake.partition`; this module only says when they
apply. ``rendered=False`` is for ``__init__``: literal values are checked while the DAG file is
parsed, so a typo shows as an import error; a value holding a template (``{{``) or an ``XComArg``
waits for ``execute``. ``rendered=True`` is for ``execute``, after templating: every value is checked
before Spark starts, a job is submitted or an MLflow run opens.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidPartitionError, InvalidSpecError
from airflow_provider_dltrain.lake import partition as part


def is_templated(value: object) -> bool:
    """Whether ``value`` is a Jinja template Airflow renders later (``{{ ds }}``, ``{% ... %}``)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def check_partition(
    partition: Any,
    formats: Mapping[str, object] | None = None,
    *,
    rendered: bool,
    field: str = "partition",
) -> dict[str, str] | None:
    """The validated partition (``rendered``), or ``None`` after checking its literal values only."""
    if rendered:
        return part.validate_partition(partition, field=field, formats=formats)
    if not isinstance(partition, Mapping):
        if partition is None or is_templated(partition) or not isinstance(partition, (str, bytes)):
            return None  # a template or an XComArg: checked in execute, once it is a dict
        raise InvalidPartitionError(
            f"{field} must be a dict of column -> value, e.g. {{'ds': '2026-11-28'}}; got {partition!r:.100}"
        )
    if not any(is_templated(column) or is_templated(value) for column, value in partition.items()):
        part.validate_partition(partition, field=field, formats=formats)
        return None
    declared = part.check_partition_formats(formats, columns=[str(c) for c in partition])
    for column, value in partition.items():
        if not is_templated(column) and not is_templated(value) and isinstance(value, (str, int)):
            part.check_partition_value(str(column), value, declared.get(str(column)), field=field)
    return None


def check_dates(dates: Mapping[str, Any], *, rendered: bool) -> None:
    """Refuse any value of ``{field: value}`` that is not a date; ``None`` and ``""`` mean "not given"."""
    for field, value in dates.items():
        if value is None or value == "":
            continue
        if not rendered and (is_templated(value) or not isinstance(value, (str, dt.date))):
            continue
        part.check_date(value, field)


def check_force(value: Any, *, rendered: bool, field: str = "force") -> bool:
    """``force`` as a bool: ``True``/``False`` or, once a template rendered it, their text.

    Unrendered (``__init__``), a template or an ``XComArg`` passes as False until ``execute``.
    """
    if isinstance(value, bool):
        return value
    if not rendered and (is_templated(value) or not isinstance(value, (str, int, type(None)))):
        return False
    text = "" if value is None else str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none"):
        return False
    raise InvalidSpecError(f"{field} must be True or False, got {value!r:.100}")
