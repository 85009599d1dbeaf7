"""Read back what a demo date produced, from the tables themselves."""

from __future__ import annotations

from typing import Any

from airflow_provider_dltrain.demo import paths


def partition_rows(uri: str, ds: str) -> tuple[int | None, int]:
    """(newest version, rows in partition ``ds``) of a table; ``(None, 0)`` when it does not exist."""
    from airflow_provider_dltrain.lake.filters import normalize_filter
    from airflow_provider_dltrain.lake.log import DeltaLog
    from airflow_provider_dltrain.lake.reader import read_version, scan_version

    version = DeltaLog(uri).latest_version()
    if version is None:
        return None, 0
    scan = scan_version(DeltaLog(uri).ref(version), filters=[("ds", "=", ds)])
    return version, read_version(scan, ["ds"], normalize_filter([["ds", "=", ds]])).num_rows


def ingest_summary(ds: str) -> dict[str, Any]:
    version, rows = partition_rows(paths.table("digits"), ds)
    _, quarantined = partition_rows(paths.table("digits_quarantine"), ds)
    return {"digits_version": version, "rows": rows, "quarantined": quarantined}
