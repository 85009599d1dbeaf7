"""Delta table references, version resolution and idempotent partition writes (no Airflow)."""

from __future__ import annotations

from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.partition import predicate, validate_partition
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import s3_storage_options
from airflow_provider_dltrain.lake.table import active_files, as_of, has_partition, latest, open_table, ref_at
from airflow_provider_dltrain.lake.write import (
    WrittenFile,
    check_schema,
    commit_files,
    commit_metadata,
    overwrite_partition,
)

__all__ = [
    "DeltaLog",
    "DeltaRef",
    "WrittenFile",
    "active_files",
    "as_of",
    "check_schema",
    "commit_files",
    "commit_metadata",
    "has_partition",
    "latest",
    "open_table",
    "overwrite_partition",
    "predicate",
    "ref_at",
    "s3_storage_options",
    "validate_partition",
]
