"""Raw ``s3://`` inputs for the local Spark engine, read through pyarrow's S3 filesystem.

The embedded Spark has no hadoop-aws jars, so it cannot open ``s3a://`` paths. The driver lists the
objects with the input's own storage options (hidden ``_``/``.`` names skipped, as Spark skips
them; ``pathGlobFilter`` honoured); executors read them. ``parquet`` and ``binaryFile`` rows are
built in the executors from Arrow; ``csv`` and ``json`` lines are handed to Spark's own parsers, so
their options (``header``, ``sep``, ``schema``, ``mode`` ...) mean what they mean in Spark; records
spanning several lines (``multiLine``) are refused here.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from typing import Any

from airflow_provider_dltrain.exceptions import InputNotFoundError, InvalidSpecError, NoFilesMatchedError
from airflow_provider_dltrain.lake.storage import StorageOptions, filesystem

BINARY_FILE_DDL = "path string, modificationTime timestamp, length long, content binary"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def list_files(
    uri: str, storage_options: StorageOptions | None, glob: str | None = None
) -> list[tuple[str, int, int]]:
    """``(s3 uri, size, mtime in ms)`` of every visible object at or under ``uri``, sorted."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri, storage_options)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise InputNotFoundError(f"nothing at {uri} (the path does not exist)")
    found = (
        [info]
        if info.type == pafs.FileType.File
        else fs.get_file_info(pafs.FileSelector(root, recursive=True))
    )
    out = []
    for item in found:
        relative = item.path[len(root) :].strip("/") or item.base_name
        if item.type != pafs.FileType.File or any(p.startswith(("_", ".")) for p in relative.split("/")):
            continue
        if glob and not fnmatch.fnmatchcase(item.base_name, glob):
            continue
        mtime = int(item.mtime.timestamp() * 1000) if item.mtime is not None else 0
        out.append((f"s3://{item.path}", int(item.size or 0), mtime))
    return sorted(out)


def read_remote(
    spark: Any, uri: str, fmt: str, options: dict[str, str], storage_options: StorageOptions | None
) -> Any:
    """A DataFrame over the ``fmt`` files at ``uri`` (``s3://``), read with ``storage_options``."""
    if options.get("multiLine", "false").lower() == "true":
        raise InvalidSpecError(
            f"input {uri}: multiLine is not supported for s3:// inputs of the local engine; "
            "write one record per line"
        )
    glob = options.pop("pathGlobFilter", None)
    files = list_files(uri, storage_options, glob)
    if not files and glob:
        names = [f[0].rsplit("/", 1)[-1] for f in list_files(uri, storage_options)]
        raise NoFilesMatchedError.at(uri, glob, names)
    if not files and fmt not in ("binaryFile", "text"):
        raise InputNotFoundError(f"nothing at {uri} (no {fmt} files there)")
    opts = dict(storage_options or {})
    listing = spark.createDataFrame(files or [], "uri string, size long, mtime long")
    if files:
        listing = listing.repartition(min(len(files), 4 * spark.sparkContext.defaultParallelism))
    if fmt == "binaryFile":
        return listing.mapInArrow(lambda b: _binary_files(b, opts), BINARY_FILE_DDL)
    if fmt == "parquet":
        return _parquet(spark, listing, [f[0] for f in files], opts)
    encoding = options.pop("encoding", options.pop("charset", "utf-8"))
    whole = fmt == "text" and options.pop("wholetext", "false").lower() == "true"
    lines = listing.mapInArrow(lambda b: _lines(b, opts, encoding, whole), "value string")
    if fmt == "text":
        return lines
    reader = spark.read.options(**options)
    texts = lines.rdd.map(lambda row: row[0])
    return reader.csv(texts) if fmt == "csv" else reader.json(texts)


def _parquet(spark: Any, listing: Any, uris: list[str], opts: StorageOptions) -> Any:
    import pyarrow.dataset as pads

    from airflow_provider_dltrain.etl.spark import from_arrow_schema

    fs, _ = filesystem(uris[0], opts)
    # The union of the files' schemas (Spark's mergeSchema), read from their footers.
    schema = pads.dataset([u.split("://", 1)[1] for u in uris], filesystem=fs, format="parquet").schema
    return listing.mapInArrow(lambda b: _parquet_files(b, opts, schema), from_arrow_schema(schema))


def _objects(batches: Iterator[Any], opts: StorageOptions) -> Iterator[tuple[Any, str, dict[str, Any]]]:
    for listing in batches:
        for item in listing.to_pylist():
            fs, path = filesystem(item["uri"], opts)
            yield fs, path, item


def _binary_files(batches: Iterator[Any], opts: StorageOptions) -> Iterator[Any]:
    import pyarrow as pa

    for fs, path, item in _objects(batches, opts):
        with fs.open_input_stream(path) as handle:
            content = handle.read()
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "path": item["uri"],
                    "modificationTime": item["mtime"] * 1000,
                    "length": len(content),
                    "content": content,
                }
            ],
            schema=pa.schema(
                [
                    ("path", pa.string()),
                    ("modificationTime", pa.timestamp("us", tz="UTC")),
                    ("length", pa.int64()),
                    ("content", pa.binary()),
                ]
            ),
        )


def _lines(batches: Iterator[Any], opts: StorageOptions, encoding: str, whole: bool) -> Iterator[Any]:
    import pyarrow as pa

    for fs, path, _ in _objects(batches, opts):
        with fs.open_input_stream(path) as handle:
            text = handle.read().decode(encoding)
        lines = [text] if whole else _LINE_BREAK.split(text)
        if not whole and lines and lines[-1] == "":
            lines.pop()  # the final line break ends the last line; it starts no new one
        if lines:
            yield pa.RecordBatch.from_pydict({"value": lines}, schema=pa.schema([("value", pa.string())]))


def _parquet_files(batches: Iterator[Any], opts: StorageOptions, schema: Any) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for fs, path, _ in _objects(batches, opts):
        with fs.open_input_file(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=65_536):
                columns = [
                    batch.column(f.name).cast(f.type)
                    if f.name in batch.schema.names
                    else pa.nulls(batch.num_rows, f.type)
                    for f in schema
                ]
                yield pa.RecordBatch.from_arrays(columns, schema=schema)
