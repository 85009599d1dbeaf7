"""The backfill horizon: how far back every date stays reproducible, and the table settings it needs.

Reading version v of a Delta table needs its log (a checkpoint at or before v and the commit files
after it) and the data files v points to. delta-rs removes both by default: after each checkpoint
(every ``delta.checkpointInterval`` = 100 commits) commit files older than
``delta.logRetentionDuration`` (30 days), and ``VACUUM`` data files removed longer ago than
``delta.deletedFileRetentionDuration`` (7 days). A backfill of a date older than that could not pin
or read its data. So the tables the provider creates carry retention properties of at least the
horizon (:func:`table_properties`), an existing table with less is reported before a run uses it
(:func:`retention_warnings`), and the provider's vacuum never deletes inside the horizon.

The horizon is ``DLTRAIN_BACKFILL_HORIZON_DAYS`` (default 400: a year of nightly runs plus a month),
or per operator ``write={"backfill_horizon_days": N}``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

DEFAULT_HORIZON_DAYS = 400
HORIZON_ENV = "DLTRAIN_BACKFILL_HORIZON_DAYS"
LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
# Delta's defaults, where a table does not set them
DEFAULTS = {LOG_RETENTION: 30 * 24.0, FILE_RETENTION: 7 * 24.0}
# Delta Spark's default (delta-rs's is 100): loading a snapshot reads the newest checkpoint and every
# commit file after it, one request each on S3, so a daily table with delta-rs's default makes up to
# 99 reads per load; with 10 at most 9, for a checkpoint (one small Parquet file) every 10 commits.
CHECKPOINT_EVERY = 10
_UNIT_HOURS = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
_INTERVAL = re.compile(r"\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*", re.I)


def horizon_days(value: int | str | None = None) -> int:
    """The backfill horizon in days: ``value``, else ``DLTRAIN_BACKFILL_HORIZON_DAYS``, else 400."""
    raw: Any = value if value is not None else os.environ.get(HORIZON_ENV) or DEFAULT_HORIZON_DAYS
    field = "backfill_horizon_days" if value is not None else HORIZON_ENV
    try:
        days = int(raw)
    except (TypeError, ValueError):
        raise InvalidSpecError(f"{field} must be a whole number of days, got {raw!r}") from None
    if days < 1:
        raise InvalidSpecError(f"{field} must be at least 1 day, got {days}")
    return days


def table_properties(days: int | str | None = None) -> dict[str, str]:
    """The properties a table the provider creates carries: log and removed files kept for the horizon."""
    interval = f"interval {horizon_days(days)} days"
    return {LOG_RETENTION: interval, FILE_RETENTION: interval, CHECKPOINT_INTERVAL: str(CHECKPOINT_EVERY)}


def interval_hours(text: str | None, default: float) -> float:
    """``interval 30 days`` (Delta's CalendarInterval text) in hours; ``default`` when unset or unreadable."""
    match = _INTERVAL.fullmatch(str(text or ""))
    if not match:
        return default
    return int(match.group(1)) * _UNIT_HOURS[match.group(2).lower()]


def retention_hours(configuration: Mapping[str, str] | None) -> dict[str, float]:
    """The table's log and removed-file retention in hours (Delta's defaults where unset)."""
    config = dict(configuration or {})
    return {name: interval_hours(config.get(name), default) for name, default in DEFAULTS.items()}


def retention_warnings(
    uri: str,
    configuration: Mapping[str, str] | None,
    days: int | str | None = None,
    *,
    now: float | None = None,
) -> list[str]:
    """One warning per retention property shorter than the horizon: the property, its value and the
    oldest date that can still be reproduced (empty when the table keeps the whole horizon)."""
    horizon = horizon_days(days)
    config = dict(configuration or {})
    out = []
    now = time.time() if now is None else now
    for name, hours in retention_hours(config).items():
        if name == LOG_RETENTION and str(config.get(EXPIRED_LOG_CLEANUP, "true")).lower() == "false":
            continue  # the log is never cleaned up
        if hours >= horizon * 24:
            continue
        oldest = datetime.fromtimestamp(now - hours * 3600, tz=timezone.utc).date().isoformat()
        value = config.get(name) or f"unset (Delta's default {DEFAULTS[name] / 24:g} days)"
        what = "commit files" if name == LOG_RETENTION else "data files of replaced versions"
        out.append(
            f"{uri}: {name} is {value}, shorter than the backfill horizon of {horizon} days: its {what} "
            f"are removed after that, so only dates from {oldest} on can be reproduced exactly. Set it with "
            f"`dltrain history retain {uri}` (or DeltaTable.alter.set_table_properties({{{name!r}: "
            f"'interval {horizon} days'}}))"
        )
    return out


def check_table(
    uri: str, storage_options: Mapping[str, str] | None = None, days: int | str | None = None
) -> list[str]:
    """:func:`retention_warnings` of an existing table (empty when there is no table).

    Its properties come from the table's history index: no snapshot is loaded.
    """
    from airflow_provider_dltrain.lake import history_index

    index = history_index.load(uri, dict(storage_options or {}))
    return [] if index is None else retention_warnings(index.uri, index.configuration, days)


def retain(
    uri: str, storage_options: Mapping[str, str] | None = None, days: int | str | None = None
) -> dict[str, str]:
    """Set the horizon's retention properties on an existing table (one metadata commit); returns them.

    Properties already at least as long are left as they are; nothing is committed when all are.
    """
    from airflow_provider_dltrain.lake import history_index
    from airflow_provider_dltrain.lake.table import open_table

    table = open_table(uri, None, dict(storage_options or {}))
    config = dict(table.metadata().configuration or {})
    wanted = table_properties(days)
    hours = retention_hours(config)
    change = {
        name: value
        for name, value in wanted.items()
        if name in hours and hours[name] < interval_hours(value, 0.0)
    }
    if change:
        table.alter.set_table_properties(change)
        history_index.update(uri, dict(storage_options or {}))
    return change
