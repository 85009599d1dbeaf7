"""Turn input specs (raw files or pinned Delta versions) into Spark DataFrames.

A Delta version is read the way Delta defines its rows, without the Delta Spark jars: delta-rs
resolves the version on the driver (files pruned by the partition filter, deletion vectors turned
into the row indices they drop, column mapping refused), and Spark executors read those Parquet
files with pyarrow, dropping the deleted rows and applying the filter to rows. Nothing but the file
list passes through the driver, so the data is never collected there. Local paths and ``s3://``
read the same way (the local engine has no hadoop-aws jars; pyarrow's S3 filesystem reaches S3).

Why not Spark's own Parquet reader: it cannot apply deletion vectors, cannot reach S3 here, and
gives partition columns as strings. Measured roughly on 2 shared cores, 2M rows x 3 columns in 8
files, counting rows matching a filter on a non-partition column (warm session): Spark's reader
0.5 s, this reader 1.2 s (the Arrow hop from the Python workers); scoring and transforms cost far more.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from airflow_provider_dltrain.exceptions import (
    InputNotFoundError,
    InvalidSpecError,
    LandingFileError,
    NoFilesMatchedError,
)
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, is_remote, normalize_uri

RAW_FORMATS = ("binaryFile", "csv", "parquet", "json", "text")
# Values delta-rs accepts in filter tuples (and that compare the same in pyarrow).
_PLAIN = (str, int, float, bool, date, datetime, Decimal)
_GLOB_CHARS = "*?[{"
# The attribute :func:`read_inputs` tags each input DataFrame with: ``(input name, what it read)``,
# so that a transform's refusal (``etl.transform.require_columns``) can name the file.
SOURCE_ATTR = "_dltrain_source"
log = logging.getLogger(__name__)


def check_filters(value: Any, field: str) -> tuple[tuple[tuple[str, str, Any], ...], ...]:
    """``value`` as a DNF of ``(column, op, value)`` or :class:`InvalidSpecError` naming ``field``.

    Only the operators delta-rs takes (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``,
    ``not in``; ``==`` means ``=``) and plain values (str, int, float, bool, date, datetime,
    Decimal) pass: call it before any job runs, so a typo fails once instead of being retried.
    """
    from airflow_provider_dltrain.lake.filters import normalize_filter

    try:
        dnf = normalize_filter(value)
    except InvalidSpecError as err:
        raise InvalidSpecError(f"{field}: {err}") from err
    for column, op, operand in (p for conj in dnf for p in conj):
        values = operand if op in ("in", "not in") else (operand,)
        bad = [v for v in values if not isinstance(v, _PLAIN)]
        if bad:
            raise InvalidSpecError(
                f"{field}: the value for {column!r} {op} is {bad[0]!r:.100} ({type(bad[0]).__name__}); "
                "use a string, number, boolean or date"
            )
    return tuple(tuple((c, "=" if op == "==" else op, v) for c, op, v in conj) for conj in dnf)


def delta_rs_filters(dnf: Any) -> list[list[tuple[str, str, Any]]] | None:
    return [[(c, op, list(v) if isinstance(v, tuple) else v) for c, op, v in conj] for conj in dnf] or None


def read_delta(
    spark: Any,
    ref: DeltaRef,
    storage_options: StorageOptions | None = None,
    filters: Any = None,
    *,
    field: str = "filters",
) -> Any:
    """Exactly the rows of ``ref``'s version (deleted rows excluded) matching ``filters``.

    ``filters`` is a DNF list of ``[column, op, value]``: it prunes files by partition values and
    statistics on the driver, then selects rows in the executors. Partition columns carry the
    table's types.
    """
    from airflow_provider_dltrain.lake.reader import scan_version

    dnf = check_filters(filters, field)
    return read_scan(spark, scan_version(ref, storage_options, delta_rs_filters(dnf)), storage_options, dnf)


def read_scan(spark: Any, scan: Any, storage_options: StorageOptions | None = None, dnf: Any = ()) -> Any:
    """A DataFrame over a :class:`~airflow_provider_dltrain.lake.reader.VersionScan`, read in executors."""
    from airflow_provider_dltrain.etl.spark import from_arrow_schema
    from airflow_provider_dltrain.lake.filters import filter_expression

    spark_schema = from_arrow_schema(scan.schema)
    try:
        expr = filter_expression(dnf, scan.schema)  # checks every filtered column exists
    except InvalidSpecError as err:
        raise InvalidSpecError(f"{scan.ref.uri} version {scan.ref.version}: {err}") from err
    if not scan.files:
        return spark.createDataFrame([], spark_schema)
    rows = [(f.uri, json.dumps(dict(f.partition)), list(f.deleted_rows)) for f in scan.files]
    listing = spark.createDataFrame(rows, "uri string, partition string, deleted array<long>")
    # One task per file (at most 4 per core): the unit a Parquet reader splits work by here.
    slices = min(len(rows), 4 * spark.sparkContext.defaultParallelism)
    schema, options = scan.schema, dict(storage_options or {})

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        return read_files(batches, schema, options, expr)

    return listing.repartition(slices).mapInArrow(read, spark_schema)


def read_files(
    batches: Iterator[Any], schema: Any, storage_options: StorageOptions, expr: Any
) -> Iterator[Any]:
    """Executor side: the listed files' rows in ``schema``, deleted rows dropped, ``expr`` applied."""
    from airflow_provider_dltrain.lake.reader import iter_file_batches

    for listing in batches:
        for item in listing.to_pylist():
            partition = json.loads(item["partition"])
            yield from iter_file_batches(
                item["uri"], schema, storage_options, partition, item["deleted"] or (), expr
            )


def read_input(
    spark: Any, spec: Any, storage_options: StorageOptions | None = None, *, name: str = "input"
) -> Any:
    """Read one input: a ``DeltaRef`` (dict), ``{"path": ..., "format": ..., "options": {...}}`` or
    ``{"dvc": {"repo", "path", "rev"}, "format": ...}`` (:mod:`~airflow_provider_dltrain.etl.dvc_inputs`)."""
    if isinstance(spec, Mapping) and "dvc" in spec:
        from airflow_provider_dltrain.etl.dvc_inputs import raw_spec

        spec = raw_spec(name, spec)  # the pinned file's local copy, read as a raw input
    if is_delta_spec(spec):
        ref = DeltaRef.coerce(spec)  # type: ignore[arg-type]
        return read_delta(
            spark, ref, storage_options, spec.get("filters") if isinstance(spec, Mapping) else None
        )
    if isinstance(spec, str):
        spec = {"path": spec, "format": "parquet"}
    if not isinstance(spec, Mapping) or "path" not in spec:
        raise InvalidSpecError(
            f"an input must be a DeltaRef dict or {{'path': ..., 'format': one of {RAW_FORMATS}}}; got {spec!r:.200}"
        )
    fmt = spec.get("format", "parquet")
    if fmt not in RAW_FORMATS:
        raise InvalidSpecError(f"input format {fmt!r} is not supported; use one of {RAW_FORMATS}")
    options = {str(k): str(v) for k, v in dict(spec.get("options") or {}).items()}
    if fmt == "csv":
        options.setdefault("header", "true")
    path = str(spec["path"])
    if is_remote(path):
        from airflow_provider_dltrain.etl.remote_files import read_remote

        return read_remote(spark, normalize_uri(path), fmt, options, storage_options)
    return _read_landing(spark, normalize_uri(path), fmt, options, spec)


def _read_landing(spark: Any, local: str, fmt: str, options: dict[str, str], spec: Mapping[str, Any]) -> Any:
    """A local raw input, checked first (:mod:`~airflow_provider_dltrain.etl.landing_files`).

    Globs and ``{a,b}`` alternatives are expanded and every match checked; Spark is handed the
    checked files only, never a folder or a pattern. ``binaryFile`` files are read by Python workers
    that never follow a link (names Hadoop rejects, such as ``a:b.png``, read too, and zero-byte
    files give a row). For the other formats Spark's reader gets private copies of the checked bytes
    (:func:`~airflow_provider_dltrain.etl.landing_reads.stage_files`), every record found within
    ``max_line_bytes`` on the way. The refused files are logged and tagged on the DataFrame
    (:func:`landing_files.refused_files`); the write quarantines them.
    """
    from airflow_provider_dltrain.etl import landing_files, landing_reads
    from airflow_provider_dltrain.etl.landing_files import checks_lines, max_file_bytes_of, max_line_bytes_of
    from airflow_provider_dltrain.etl.remote_files import BINARY_FILE_DDL

    if _has_glob(local) and not os.path.isdir(landing_files.anchor_of(local)):
        raise InputNotFoundError(f"nothing at {landing_files.anchor_of(local)} (the path does not exist)")
    max_line_bytes, max_file_bytes = max_line_bytes_of(spec), max_file_bytes_of(spec, fmt, options)
    glob = options.pop("pathGlobFilter", None) if fmt == "binaryFile" else options.get("pathGlobFilter")
    landing = landing_files.list_landing(
        local, glob, spark_reads=fmt != "binaryFile", max_file_bytes=max_file_bytes
    )
    if not landing.files and not landing.refused and (glob or _has_glob(local)):
        raise _no_match(local, glob) if glob else _no_match(*_split_glob(local))
    if landing.refused:
        # repr: a landed name is anyone's text, and a line break in it must not forge a log line
        shown = "; ".join(f"{r.path!r}: {r.reason}" for r in landing.refused[:50])
        more = f"; and {len(landing.refused) - 50} more" if len(landing.refused) > 50 else ""
        log.warning("%s: %d file(s) not read: %s%s", local, len(landing.refused), shown, more)
    if fmt == "binaryFile":
        listing = spark.createDataFrame([(f,) for f in landing.files], "file string")
        if landing.files:
            listing = listing.repartition(min(len(landing.files), 4 * spark.sparkContext.defaultParallelism))
        reader = landing_reads.binary_file_reader(landing.anchor, max_file_bytes)
        df = listing.mapInArrow(reader, BINARY_FILE_DDL)
    else:
        rule = landing_reads.RecordRule.of(fmt, options) if checks_lines(fmt, options) else None

        def check(path: str, chunks: Iterator[bytes]) -> Iterator[bytes]:
            return landing_reads.check_records(path, chunks, max_line_bytes, rule) if rule else chunks

        df = _spark_read(spark, local, fmt, options, landing, check, max_file_bytes)
    with contextlib.suppress(Exception):  # a DataFrame class that takes no attributes
        setattr(df, landing_files.REFUSED_ATTR, landing.refused)
    return df


def _check_format(name: str, spec: Mapping[str, Any]) -> None:
    fmt = spec.get("format", "parquet")
    if fmt not in RAW_FORMATS:
        raise InvalidSpecError(f"inputs[{name!r}].format {fmt!r} is not supported; use one of {RAW_FORMATS}")


def _spark_read(
    spark: Any,
    local: str,
    fmt: str,
    options: dict[str, str],
    landing: Any,
    check: Any,
    max_file_bytes: int | None,
) -> Any:
    """Spark's reader on private copies of the accepted files (the input's folder kept as basePath)."""
    from airflow_provider_dltrain.etl.landing_reads import stage_files

    if not landing.files:
        return spark.createDataFrame([], "value string" if fmt == "text" else "_corrupt_record string")
    folder, copies = stage_files(landing.anchor, landing.files, check=check, max_file_bytes=max_file_bytes)
    reader = spark.read.format(fmt).options(**options)
    if os.path.isdir(local) and not _has_glob(local):
        reader = reader.option("basePath", folder)
    return reader.load([_hadoop_literal(c) for c in copies])


def _hadoop_literal(path: str) -> str:
    """``path`` as a Hadoop glob matching itself only (Spark globs every path it is given)."""
    return "".join(f"\\{c}" if c in "*?[]{}\\" else c for c in path)


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in _GLOB_CHARS)


def _not_found(err: Exception) -> bool:
    return "PATH_NOT_FOUND" in str(err) or "Path does not exist" in str(err)


def _split_glob(path: str) -> tuple[str, str]:
    """``(folder, pattern)``: the folder above the first path component holding a glob character."""
    parts = path.split("/")
    first = next(i for i, part in enumerate(parts) if _has_glob(part))
    return "/".join(parts[:first]) or "/", "/".join(parts[first:])


def _no_match(folder: str, glob: str) -> NoFilesMatchedError:
    """``no file matched <glob>``, with what the folder holds instead (a few names)."""
    try:
        names = sorted(
            n for n in os.listdir(folder) if not n.startswith(("_", ".")) and os.path.isfile(f"{folder}/{n}")
        )
    except OSError:
        names = []
    return NoFilesMatchedError.at(folder, glob, names)


def source_of(spec: Any) -> str:
    """What an input reads, in words: the path (and glob) of raw files, or a Delta table version."""
    if is_delta_spec(spec):
        ref = DeltaRef.coerce(spec)  # type: ignore[arg-type]
        return f"{ref.uri} version {ref.version}"
    if isinstance(spec, Mapping) and "dvc" in spec:
        from airflow_provider_dltrain.etl.dvc_inputs import describe

        return describe(spec)
    if isinstance(spec, Mapping):
        glob = dict(spec.get("options") or {}).get("pathGlobFilter")
        return f"{spec.get('path')}" + (f" (pathGlobFilter {glob!r})" if glob else "")
    return str(spec)


def _tag(df: Any, name: str, spec: Any) -> Any:
    # A DataFrame class that takes no attributes: refusals then name the input only.
    with contextlib.suppress(Exception):
        setattr(df, SOURCE_ATTR, (name, source_of(spec)))
    return df


def is_delta_spec(spec: Any) -> bool:
    return isinstance(spec, DeltaRef) or (isinstance(spec, Mapping) and "version" in spec and "uri" in spec)


def input_uri(spec: Any) -> str | None:
    """The table or path an input spec reads (``None`` when it names none)."""
    if isinstance(spec, DeltaRef):
        return spec.uri
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping) and "dvc" in spec:
        return None  # a file in a git repository: no table or path of ours (lineage names it apart)
    if isinstance(spec, Mapping):
        value = spec.get("uri") if is_delta_spec(spec) else spec.get("path")
        return str(value) if value is not None else None
    return None


def check_inputs(inputs: Mapping[str, Any]) -> None:
    """Validate every Delta input's filters and raw input's ``max_line_bytes`` before anything runs."""
    for name, spec in (inputs or {}).items():
        if is_delta_spec(spec) and isinstance(spec, Mapping):
            check_filters(spec.get("filters"), f"inputs[{name!r}].filters")
        elif isinstance(spec, Mapping) and "dvc" in spec:
            from airflow_provider_dltrain.etl.dvc_inputs import check_dvc_spec

            check_dvc_spec(name, spec)
            _check_format(name, spec)
        elif isinstance(spec, Mapping):
            from airflow_provider_dltrain.etl.landing_files import max_file_bytes_of, max_line_bytes_of

            try:
                max_line_bytes_of(spec)
                max_file_bytes_of(spec, str(spec.get("format", "parquet")), dict(spec.get("options") or {}))
            except InvalidSpecError as err:
                raise InvalidSpecError(f"inputs[{name!r}].{err}") from None


def read_inputs(
    spark: Any,
    inputs: Mapping[str, Any],
    storage_options: StorageOptions | None = None,
    *,
    input_storage_options: Mapping[str, StorageOptions | None] | None = None,
) -> dict[str, Any]:
    """Every input by name; a raw path that does not exist raises :class:`InputNotFoundError` naming it.

    A glob (``pathGlobFilter``, or a pattern in the path) that matches no file in a folder that
    exists raises :class:`NoFilesMatchedError` naming the input, the glob and the folder: a user
    error, never retried. Each DataFrame is tagged with its input's name and path, so that
    :func:`~airflow_provider_dltrain.etl.transform.require_columns` can name the file it refuses.
    ``input_storage_options`` gives an input its own storage options (by input name); the others
    use ``storage_options``.
    """
    check_inputs(inputs)
    per_input = dict(input_storage_options or {})
    frames = {}
    for name, spec in (inputs or {}).items():
        options = per_input.get(name, storage_options)
        try:
            if is_delta_spec(spec) and isinstance(spec, Mapping):
                frames[name] = read_delta(
                    spark,
                    DeltaRef.coerce(dict(spec)),
                    options,
                    spec.get("filters"),
                    field=f"inputs[{name!r}].filters",
                )
            else:
                frames[name] = read_input(spark, spec, options, name=name)
        except InputNotFoundError as err:
            raise InputNotFoundError(f"input {name!r}: {err}") from None
        except NoFilesMatchedError as err:  # a user error: a wrong glob does not fix itself
            raise NoFilesMatchedError(f"input {name!r}: {err}") from None
        except LandingFileError as err:
            raise LandingFileError(f"input {name!r}: {err}") from None
        except Exception as err:
            if not _not_found(err):
                raise
            # Retryable: the usual cause is data that has not landed yet for this date.
            raise InputNotFoundError(
                f"input {name!r}: nothing at {input_uri(spec)} (the path does not exist). Has the data for "
                "this date landed? Check the path template, or re-run once it has arrived."
            ) from None
        _tag(frames[name], name, spec)
    return frames
