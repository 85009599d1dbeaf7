"""Spark DataFrame → one Delta partition, without the Delta Spark jars.

Executors write Parquet files with Arrow straight into the table directory (good rows) and the
quarantine table (rows the transform marked with a non-null ``_error``) and send back only file
metadata; the driver checks the bad-row fraction and commits one overwrite per table through
delta-rs. Driver memory grows with the number of files, never with the data. Every write commits
this way, through delta-rs: there is no Delta Spark path.

A re-run that produces the same rows (in any order, any number of files) commits nothing to either
table: executors hash what they write, and the commit is skipped when the digest equals the
partition's current one (see :mod:`~airflow_provider_dltrain.lake.digest`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dltrain.etl.arrow_files import (
    QUARANTINE_FIELDS,
    file_writer_fn,
    refused_file_results,
    result_schema,
)
from airflow_provider_dltrain.etl.landing_files import RefusedFile, refused_files
from airflow_provider_dltrain.etl.progress import SparkProgress
from airflow_provider_dltrain.exceptions import BadDataError, InvalidSpecError
from airflow_provider_dltrain.lake import partition as part
from airflow_provider_dltrain.lake.digest import DigestState
from airflow_provider_dltrain.lake.pairing import (
    META_MAIN_DIGEST,
    META_MAIN_VERSION,
    META_ROWS_QUARANTINED,
    pairing_metadata,
)
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.retention import table_properties
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri
from airflow_provider_dltrain.lake.write import (
    PartitionWrite,
    SchemaMode,
    check_schema,
    commit_files,
    table_arrow_schema,
)
from airflow_provider_dltrain.lake.written_files import (
    WrittenFile,
    delete_files,
    missing_dirs,
    remove_empty_dirs,
)

log = logging.getLogger(__name__)
ERROR_COLUMN = "_error"


@dataclass(frozen=True)
class WriteResult:
    """What one ETL write committed.

    ``ref`` is the version holding the partition's content: the new commit, or, when ``committed``
    is False because the partition already held exactly these rows, the version that last wrote it.
    ``digest`` is the partition's content digest (``None`` when the partition is empty). ``files_written`` counts the files the job wrote, also those removed again
    because nothing changed.
    """

    ref: DeltaRef
    rows_written: int
    rows_quarantined: int
    files_written: int
    quarantine_ref: DeltaRef | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    committed: bool = True
    quarantine_committed: bool = False
    digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.ref.to_dict(),
            "committed": self.committed,
            "digest": self.digest,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "files_written": self.files_written,
            "quarantine": self.quarantine_ref.to_dict() if self.quarantine_ref else None,
            "quarantine_committed": self.quarantine_committed,
            "quarantine_reasons": self.reasons,
        }


def default_quarantine_uri(table_uri: str) -> str:
    return normalize_uri(table_uri).rstrip("/") + "_quarantine"


def _data_schema(df: Any, partition_by: Sequence[str]) -> Any:
    """Arrow schema of the data files: the DataFrame's columns minus partition and error columns."""
    import pyarrow as pa

    from airflow_provider_dltrain.etl.spark import to_arrow_schema

    schema = to_arrow_schema(df.schema)  # Spark timestamps are UTC instants
    # Nullable like every Spark-written Delta column, so a later run whose DataFrame Spark happens to
    # infer as nullable is not refused.
    keep = [f.with_nullable(True) for f in schema if f.name not in set(partition_by) | {ERROR_COLUMN}]
    return pa.schema(keep)


def _table_schema(data_schema: Any, partition_by: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema([*data_schema, *[pa.field(c, pa.string()) for c in partition_by]])


def _quarantine_table_schema(partition_by: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema([*QUARANTINE_FIELDS(), *[pa.field(c, pa.string()) for c in partition_by]])


def write_dataframe(
    df: Any,
    table_uri: str,
    partition: Mapping[str, object],
    *,
    partition_by: Sequence[str] | None = None,
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
    quarantine_uri: str | None = None,
    max_bad_fraction: float = 0.0,
    allow_empty: bool = False,
    backfill_horizon_days: int | None = None,
    refused: Sequence[RefusedFile] | None = None,
) -> WriteResult:
    """Replace ``partition`` of ``table_uri`` with ``df`` (bad rows to quarantine) in one commit each.

    :param df: Spark DataFrame; a non-null ``_error`` string marks a row as bad.
    :param partition: e.g. ``{"ds": "2026-11-28"}``; validated, never empty.
    :param max_bad_fraction: above this share of bad rows nothing is committed to either table.
    :param allow_empty: commit a write with no rows at all (emptying the partition); refused by default,
        since an input glob that matched nothing would otherwise silently erase the partition.
    :param backfill_horizon_days: the retention a table created here keeps (default
        ``DLTRAIN_BACKFILL_HORIZON_DAYS``, 400; :mod:`~airflow_provider_dltrain.lake.retention`).
    :param refused: landed files the inputs did not read (default: those
        :func:`~airflow_provider_dltrain.etl.transform.run_transform` tagged ``df`` with): one quarantine
        row each, with its reason; counted in ``rows_quarantined``, not in ``max_bad_fraction``.
    :raises SchemaMismatchError: before anything is written, naming the conflicting columns.
    :raises BadDataError: too many bad rows; the files written are removed, nothing is committed.
    """
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise InvalidSpecError(f"max_bad_fraction must be within [0, 1], got {max_bad_fraction!r}")
    table_uri = normalize_uri(table_uri)
    spec = part.validate_partition(partition)
    columns = list(partition_by or sorted(spec))
    if set(columns) != set(spec):
        raise InvalidSpecError(f"partition {spec} must name exactly the partition columns {columns}")
    quarantine_uri = normalize_uri(quarantine_uri or default_quarantine_uri(table_uri))
    data_schema = _data_schema(df, columns)
    table_schema = _table_schema(data_schema, columns)
    # Fail on a schema conflict before any Spark job runs or any file is written.
    check_schema(
        table_arrow_schema(table_uri, storage_options), table_schema, schema_mode=schema_mode, where=table_uri
    )
    target = _Target(
        table_uri,
        spec,
        columns,
        quarantine_uri,
        max_bad_fraction,
        allow_empty,
        dict(metadata or {}),
        storage_options,
        table_properties(backfill_horizon_days),
    )
    landed = list(refused_files(df) if refused is None else refused)
    return _write_with_delta_rs(df, target, data_schema, table_schema, schema_mode, landed)


@dataclass(frozen=True)
class _Target:
    """Where one write goes and what it accepts (validated by ``write_dataframe``)."""

    table_uri: str
    spec: dict[str, str]
    columns: list[str]
    quarantine_uri: str
    max_bad_fraction: float
    allow_empty: bool
    metadata: dict[str, str]
    storage_options: StorageOptions | None
    configuration: dict[str, str] = field(default_factory=dict)  # properties of a table created here

    @property
    def rel_dir(self) -> str:
        return part.path_of(self.spec, self.columns)

    def refuse_bad_counts(
        self, n_good: int, n_bad: int, reasons: Mapping[str, int], n_refused: int = 0
    ) -> str | None:
        """Why nothing may be committed (no rows, or too many bad ones), or None.

        ``n_refused`` of the ``n_bad`` rows stand for landed files not read: files, not rows of the
        transform's output, so they count toward neither the total nor the bad fraction.
        """
        n_bad -= n_refused
        total = n_good + n_bad
        if total == 0 and not self.allow_empty:
            return (
                f"the transform produced no rows for {self.rel_dir} of {self.table_uri}; nothing was committed. "
                "Check that the inputs exist and match, or pass allow_empty=True to empty the partition on purpose."
            )
        if total and n_bad / total > self.max_bad_fraction:
            top = ", ".join(f"{k!r} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:5])
            return (
                f"{n_bad} of {total} row(s) ({n_bad / total:.1%}) of {self.rel_dir} were rejected, above "
                f"max_bad_fraction={self.max_bad_fraction:.1%}; nothing was committed to {self.table_uri} or "
                f"{self.quarantine_uri}. Reasons: {top}. Fix the inputs or raise max_bad_fraction."
            )
        return None


@dataclass
class _Collected:
    """What the executors reported: files, counts, reasons and digest states, per table."""

    good: list[WrittenFile] = field(default_factory=list)
    bad: list[WrittenFile] = field(default_factory=list)
    good_state: DigestState = field(default_factory=DigestState)
    bad_state: DigestState = field(default_factory=DigestState)
    reasons: dict[str, int] = field(default_factory=dict)
    mismatched: int = 0
    refused: int = 0  # quarantine rows of landed files not read (written on the driver)

    def add(self, row: Any) -> None:
        kind = row["kind"]
        state = DigestState.from_dict(json.loads(row["digest"])) if row["digest"] else DigestState()
        if kind == "good":
            self.good.append(_written(row))
            self.good_state = self.good_state.merge(state)
        elif kind == "bad":
            self.bad.append(_written(row))
            self.bad_state = self.bad_state.merge(state)
        self.mismatched += int(row["mismatched"])
        for reason, count in (row["reasons"] or {}).items():
            self.reasons[reason] = self.reasons.get(reason, 0) + int(count)


def _write_with_delta_rs(
    df: Any,
    target: _Target,
    data_schema: Any,
    table_schema: Any,
    schema_mode: SchemaMode,
    refused: Sequence[RefusedFile] = (),
) -> WriteResult:
    t = target
    write_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:10]}"
    fn = file_writer_fn(
        table_uri=t.table_uri,
        quarantine_uri=t.quarantine_uri,
        rel_dir=t.rel_dir,
        write_id=write_id,
        data_schema=data_schema,
        partition=t.spec,
        has_error_column=ERROR_COLUMN in df.columns,
        storage_options=dict(t.storage_options or {}),
    )
    # taken before the executors create them: a refused write removes exactly these, when empty
    created = [*missing_dirs(t.table_uri, t.rel_dir), *missing_dirs(t.quarantine_uri, t.rel_dir)]
    started = time.monotonic()
    with SparkProgress(df.sparkSession, f"writing {t.rel_dir} of {t.table_uri}"):
        rows = df.mapInArrow(fn, result_schema()).collect()
    got = _Collected()
    for row in [
        *rows,
        *refused_file_results(
            t.table_uri,
            t.quarantine_uri,
            t.rel_dir,
            f"{write_id}-landing",
            t.spec,
            t.storage_options,
            refused,
        ),
    ]:
        got.add(row)
    got.refused = len(refused)
    n_good, n_bad = sum(f.num_records for f in got.good), sum(f.num_records for f in got.bad)
    log.info(
        "wrote %d good row(s) in %d file(s) and %d quarantined row(s) for %s in %.1fs",
        n_good,
        len(got.good),
        n_bad,
        t.rel_dir,
        time.monotonic() - started,
    )
    try:
        _refuse(t, got)
        quarantine, main = _commit_both(t, got, table_schema, schema_mode)
    finally:
        remove_empty_dirs(created)  # only those left empty: a refused or unchanged write
    return WriteResult(
        main.ref,
        n_good,
        n_bad,
        len(got.good),
        quarantine.ref if quarantine else None,
        got.reasons,
        committed=main.committed,
        quarantine_committed=bool(quarantine and quarantine.committed),
        digest=main.digest,
    )


def _refuse(t: _Target, got: _Collected) -> None:
    """Delete what was written and raise when nothing may be committed."""
    n_good, n_bad = sum(f.num_records for f in got.good), sum(f.num_records for f in got.bad)
    refusal = t.refuse_bad_counts(n_good, n_bad, got.reasons, got.refused)
    if not (got.mismatched or refusal):
        return
    example = _first_rejected(t, got) if refusal and got.bad else None
    delete_files(t.table_uri, got.good, t.storage_options)
    delete_files(t.quarantine_uri, got.bad, t.storage_options)
    if got.mismatched:
        raise InvalidSpecError(
            f"{got.mismatched} row(s) have a partition column value other than {t.spec}; a write of "
            f"{t.rel_dir} may only contain that partition. Nothing was committed."
        )
    raise BadDataError(
        str(refusal), rejected=n_bad, total=n_good + n_bad, reasons=got.reasons, example=example
    )


def _first_rejected(t: _Target, got: _Collected) -> str | None:
    """The preview of one rejected row (first record of a quarantine file about to be removed), or None."""
    import pyarrow.parquet as pq

    from airflow_provider_dltrain.lake.storage import filesystem, join

    try:
        fs, root = filesystem(t.quarantine_uri, t.storage_options)
        with fs.open_input_file(join(root, got.bad[0].path)) as handle:
            batch = next(pq.ParquetFile(handle).iter_batches(batch_size=1, columns=["record"]), None)
        return str(batch.column(0)[0].as_py()) if batch is not None and batch.num_rows else None
    except Exception as err:  # only an illustration for the error: never hide the refusal itself
        log.warning("could not read a rejected row back from %s: %s", t.quarantine_uri, err)
        return None


def _commit_both(
    t: _Target, got: _Collected, table_schema: Any, schema_mode: SchemaMode
) -> tuple[PartitionWrite | None, PartitionWrite]:
    """Commit the main table, then the quarantine recording which main commit it belongs to.

    Main first: a kill in between leaves the new rows beside the previous run's quarantine, which
    :func:`~airflow_provider_dltrain.lake.pairing.quarantine_pairing` reports as stale (its pairing
    names another main commit), and the re-run commits the quarantine even when its rows are the
    same. See :mod:`~airflow_provider_dltrain.lake.pairing`.
    """
    n_bad = sum(f.num_records for f in got.bad)
    main = commit_files(
        t.table_uri,
        got.good,
        table_schema,
        t.spec,
        partition_by=t.columns,
        schema_mode=schema_mode,
        metadata={**t.metadata, META_ROWS_QUARANTINED: str(n_bad)},
        storage_options=t.storage_options,
        digest=got.good_state,
        configuration=t.configuration,
    )
    if not (got.bad or table_arrow_schema(t.quarantine_uri, t.storage_options) is not None):
        return None, main
    pair = pairing_metadata(t.table_uri, t.spec, main.digest, t.storage_options) or {
        META_MAIN_VERSION: str(main.ref.version),
        META_MAIN_DIGEST: main.digest or "",
    }
    # Overwrite even with no files: a re-run with fixed inputs must clear the old bad rows.
    quarantine = commit_files(
        t.quarantine_uri,
        got.bad,
        _quarantine_table_schema(t.columns),
        t.spec,
        partition_by=t.columns,
        metadata={**t.metadata, **pair},
        storage_options=t.storage_options,
        digest=got.bad_state,
        recorded=pair,
        configuration=t.configuration,
    )
    return quarantine, main


def _written(row: Any) -> WrittenFile:
    return WrittenFile(
        row["path"], int(row["size"]), int(row["num_records"]), row["stats"], int(row["mtime"])
    )
