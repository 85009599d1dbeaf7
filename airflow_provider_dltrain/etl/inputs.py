"""Turn input specs (raw files or pinned Delta versions) into Spark DataFrames."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InputNotFoundError, InvalidSpecError
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri

RAW_FORMATS = ("binaryFile", "csv", "parquet", "json", "text")


def _spark_path(uri: str) -> str:
    """Spark reads S3 through the s3a connector; everything else as given."""
    uri = normalize_uri(uri)
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def read_delta(
    spark: Any, ref: DeltaRef, storage_options: StorageOptions | None = None, filters: Any = None
) -> Any:
    """Exactly the rows of ``ref``'s version (partition columns included), without the Delta Spark jars.

    The file list of that version is resolved on the driver by delta-rs; Spark reads those Parquet
    files, and recovers the partition columns from the Hive-style directories as strings.
    """
    from airflow_provider_dltrain.lake.table import open_table

    table = open_table(ref.uri, ref.version, storage_options)
    files = [_spark_path(f) for f in table.file_uris(filters)]
    partition_cols = list(table.metadata().partition_columns)
    if not files:
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(pa.schema(table.schema().to_arrow())))
    reader = spark.read.option("basePath", _spark_path(ref.uri)).option("mergeSchema", "true")
    df = reader.parquet(*files)
    names = [f.name for f in table.schema().fields]
    return df.select(*[c for c in names if c in df.columns or c in partition_cols])


def read_input(spark: Any, spec: Any, storage_options: StorageOptions | None = None) -> Any:
    """Read one input: a ``DeltaRef`` (dict) or ``{"path": ..., "format": ..., "options": {...}}``."""
    if isinstance(spec, DeltaRef) or (isinstance(spec, Mapping) and "version" in spec and "uri" in spec):
        ref = DeltaRef.coerce(spec)  # type: ignore[arg-type]
        return read_delta(
            spark, ref, storage_options, (spec.get("filters") if isinstance(spec, Mapping) else None)
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
    return spark.read.format(fmt).options(**options).load(_spark_path(str(spec["path"])))


def read_inputs(
    spark: Any, inputs: Mapping[str, Any], storage_options: StorageOptions | None = None
) -> dict[str, Any]:
    """Every input by name; a raw path that does not exist raises :class:`InputNotFoundError` naming it."""
    frames = {}
    for name, spec in (inputs or {}).items():
        try:
            frames[name] = read_input(spark, spec, storage_options)
        except Exception as err:
            if "PATH_NOT_FOUND" not in str(err) and "Path does not exist" not in str(err):
                raise
            path = spec.get("path") if isinstance(spec, Mapping) else spec
            # Retryable: the usual cause is data that has not landed yet for this date.
            raise InputNotFoundError(
                f"input {name!r}: nothing at {path} (the path does not exist). Has the data for this "
                "date landed? Check the path template, or re-run once it has arrived."
            ) from None
    return frames
