"""How a stage writes its partition: :class:`DeltaWriteOptions`, the ``write=`` of ``SparkToDeltaOperator``.

A user's configuration type, checked before any work starts (:func:`check_write_options`); the stage
code that writes with it is ``jobs.stages`` (wherever the stage runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError


@dataclass(frozen=True)
class DeltaWriteOptions:
    """How the transform's output is written.

    :param partition_by: partition columns of the table (default: the keys of ``partition``).
    :param schema_mode: ``"strict"`` (default) refuses any schema change; ``"merge"`` adds new columns.
    :param max_bad_fraction: share of rows marked ``_error`` above which nothing is committed to
        either table; default ``0.0``: any bad row fails the write (set e.g. ``0.05`` to quarantine
        up to 5 % and commit the rest).
    :param quarantine_uri: table for bad rows (default: ``<table_uri>_quarantine``).
    :param num_files: coalesce the output to this many files per write (default: Spark's partitioning).
    :param allow_empty: commit a write with no rows (empties the partition); refused by default.
    :param partition_formats: the format each partition column's value must have, ``"date"``
        (``YYYY-MM-DD``, a real calendar date) or a regular expression matching the whole value,
        e.g. ``{"ds": "date"}``. A value that does not match is refused before any work starts.
        Whatever the format, a value with whitespace, control characters or characters unsafe in a
        directory name (``/``, backslash, ``=``, ``:``, ``*``, ``?``, quotes, ...) is refused.
    :param backfill_horizon_days: how many days back every date stays reproducible: the log and
        removed-file retention a table (and its quarantine) created by this write keeps; an existing
        table with less is warned about. Default ``DLTRAIN_BACKFILL_HORIZON_DAYS`` (400).
    """

    partition_by: tuple[str, ...] | None = None
    schema_mode: str = "strict"
    max_bad_fraction: float = 0.0
    quarantine_uri: str | None = None
    num_files: int | None = None
    allow_empty: bool = False
    partition_formats: Mapping[str, str] | None = None
    backfill_horizon_days: int | None = None


WRITE_OPTIONS = tuple(f.name for f in dataclasses.fields(DeltaWriteOptions))


def check_write_options(
    values: Mapping[str, Any], partition: Mapping[str, object] | None = None
) -> dict[str, Any]:
    """The ``write`` dict with an unknown key or an unusable partition format refused, naming it.

    With ``partition``, also check its values against the declared formats (before any work starts).
    """
    from airflow_provider_dltrain.lake import partition as part

    if not isinstance(values, Mapping):
        raise InvalidSpecError(f"write must be a DeltaWriteOptions or its dict, got {type(values).__name__}")
    unknown = sorted(set(values) - set(WRITE_OPTIONS))
    if unknown:
        raise InvalidSpecError(f"write: unknown option(s) {unknown}; known options: {sorted(WRITE_OPTIONS)}")
    formats = values.get("partition_formats")
    part.check_partition_formats(formats, field="write.partition_formats")
    if values.get("backfill_horizon_days") is not None:
        from airflow_provider_dltrain.lake.retention import horizon_days

        horizon_days(values["backfill_horizon_days"])
    if partition is not None:
        part.validate_partition(partition, formats=formats)
    return dict(values)
