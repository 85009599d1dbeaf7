"""Delta table references, version resolution, content digests and idempotent partition writes (no Airflow)."""

from __future__ import annotations

from airflow_provider_dltrain.lake.digest import (
    META_DIGEST,
    META_PARTITION,
    DigestState,
    partition_digest,
    partition_digests,
    row_hashes,
)
from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit, partition_commits
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.maintenance import VacuumResult, vacuum
from airflow_provider_dltrain.lake.pairing import QuarantinePairing, quarantine_pairing
from airflow_provider_dltrain.lake.partition import predicate, validate_partition
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import s3_storage_options
from airflow_provider_dltrain.lake.table import active_files, as_of, has_partition, latest, open_table, ref_at
from airflow_provider_dltrain.lake.write import (
    PartitionWrite,
    check_schema,
    commit_files,
    commit_metadata,
    overwrite_partition,
)
from airflow_provider_dltrain.lake.written_files import WrittenFile

__all__ = [
    "META_DIGEST",
    "META_PARTITION",
    "DeltaLog",
    "DeltaRef",
    "DigestState",
    "PartitionWrite",
    "QuarantinePairing",
    "VacuumResult",
    "WrittenFile",
    "active_files",
    "as_of",
    "check_schema",
    "commit_files",
    "commit_metadata",
    "cutoff_commit",
    "has_partition",
    "latest",
    "open_table",
    "overwrite_partition",
    "partition_commit",
    "partition_commits",
    "partition_digest",
    "partition_digests",
    "predicate",
    "quarantine_pairing",
    "ref_at",
    "row_hashes",
    "s3_storage_options",
    "vacuum",
    "validate_partition",
]
