"""Read what the engines need from an Airflow task context (Airflow layer only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None and hasattr(value, "isoformat") else None


def run_info(context: Any) -> dict[str, Any]:
    """dag_id, run_id, task_id, try_number, logical date and data interval of the running task."""
    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    return {
        "dag_id": getattr(ti, "dag_id", None) or getattr(dag_run, "dag_id", None),
        "run_id": getattr(ti, "run_id", None) or context.get("run_id"),
        "task_id": getattr(ti, "task_id", None),
        "try_number": getattr(ti, "try_number", None),
        "logical_date": _iso(context.get("logical_date")),
        "data_interval_start": _iso(context.get("data_interval_start")),
        "data_interval_end": _iso(context.get("data_interval_end")),
    }


def commit_metadata_from(context: Any) -> dict[str, str]:
    """Delta commit metadata naming the Airflow task that committed."""
    from airflow_provider_dltrain.lake.write import commit_metadata

    info = run_info(context)
    return commit_metadata(
        dag_id=info["dag_id"],
        run_id=info["run_id"],
        task_id=info["task_id"],
        try_number=info["try_number"],
        logical_date=info["logical_date"],
    )


def storage_options_for(aws_conn_id: str | None, table_uri: str) -> dict[str, str] | None:
    """delta-rs storage options for ``table_uri`` from an ``aws`` connection; ``None`` without one."""
    if not aws_conn_id:
        return None
    from airflow_provider_dltrain.hooks.delta import DeltaTableHook

    return DeltaTableHook(aws_conn_id=aws_conn_id).get_storage_options(table_uri)


def storage_options_resolver(
    aws_conn_id: str | None, aws_conn_ids: Mapping[str, str | None] | None = None
) -> Callable[[str], dict[str, str] | None]:
    """``uri -> storage options``: the connection of the longest matching prefix in ``aws_conn_ids``
    (e.g. ``{"s3://features-bucket": "aws_features"}``), else ``aws_conn_id``."""
    from airflow_provider_dltrain.lake.storage import normalize_uri

    prefixes = sorted(
        ((normalize_uri(k), v) for k, v in (aws_conn_ids or {}).items()), key=lambda kv: -len(kv[0])
    )

    def resolve(uri: str) -> dict[str, str] | None:
        target = normalize_uri(uri)
        for prefix, conn_id in prefixes:
            if target == prefix or target.startswith(prefix.rstrip("/") + "/"):
                return storage_options_for(conn_id, uri)
        return storage_options_for(aws_conn_id, uri)

    return resolve
