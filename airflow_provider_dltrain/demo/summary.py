"""Read back what a demo date produced, from the tables themselves."""

from __future__ import annotations

from typing import Any

from airflow_provider_dltrain.demo import paths


def partition_rows(uri: str, ds: str) -> tuple[int | None, int]:
    """(newest version, rows in partition ``ds``) of a table; ``(None, 0)`` when it does not exist."""
    from airflow_provider_dltrain.lake.log import DeltaLog
    from airflow_provider_dltrain.lake.table import open_table

    version = DeltaLog(uri).latest_version()
    if version is None:
        return None, 0
    table = open_table(uri, version)
    return version, int(table.to_pyarrow_dataset().count_rows(filter=_ds_filter(ds)))


def _ds_filter(ds: str) -> Any:
    import pyarrow.dataset as pads

    return pads.field("ds") == ds


def ingest_summary(ds: str) -> dict[str, Any]:
    version, rows = partition_rows(paths.table("digits"), ds)
    _, quarantined = partition_rows(paths.table("digits_quarantine"), ds)
    return {"digits_version": version, "rows": rows, "quarantined": quarantined}
