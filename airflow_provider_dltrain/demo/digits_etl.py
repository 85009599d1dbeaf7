"""The demo's ETL transform: a day's digit PNGs + labels file → normalised pixel rows.

Follows the transform contract ``transform(spark, inputs, params) -> DataFrame``. Rows that cannot
be used get a reason in ``_error`` and go to quarantine instead of the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

IMAGE_SIZE = 8
NUM_CLASSES = 10


def _decode(content: bytes, size: int) -> tuple[list[float] | None, str | None]:
    import io

    import numpy as np
    from PIL import Image

    try:
        with Image.open(io.BytesIO(content)) as img:
            img.load()
            if img.size != (size, size):
                return None, f"image is {img.size[0]}x{img.size[1]}, expected {size}x{size}"
            pixels = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
    except Exception as err:  # any decoder failure is a property of the file, not of the job
        return None, decode_error_reason(err)
    return pixels.reshape(-1).tolist(), None


def decode_error_reason(err: Exception) -> str:
    """A quarantine reason that is the same on every run: no memory addresses in it.

    PIL names the stream it could not read (``<_io.BytesIO object at 0x7f...>``); left in, the
    quarantined rows, and so the quarantine table's content digest, would differ on every re-run.
    """
    import re

    message = re.sub(r"\s*<[^<>]*\bat 0x[0-9a-fA-F]+>", "", str(err))
    message = re.sub(r"\b0x[0-9a-fA-F]{6,}\b", "0x…", message).strip()
    return f"cannot decode PNG: {type(err).__name__}" + (f": {message}" if message else "")[:280]


def _decode_batches(batches: Iterator[Any], size: int) -> Iterator[Any]:
    import pandas as pd

    for pdf in batches:
        decoded = [_decode(bytes(c), size) for c in pdf["content"]]
        yield pd.DataFrame(
            {
                "file": pdf["path"].str.rsplit("/", n=1).str[-1],
                "source_file": pdf["path"].str.split("/").str[-3:].str.join("/"),
                "features": [d[0] for d in decoded],
                "_error": [d[1] for d in decoded],
            }
        )


def decode_digits(spark: Any, inputs: dict[str, Any], params: dict[str, Any]) -> Any:
    """Decode ``inputs["images"]`` (binaryFile) and join ``inputs["labels"]`` (CSV: file,label).

    Every landed image yields exactly one row, good or quarantined with a reason that is the same on
    every run: an undecodable or empty file, no label, several labels for the file, a label that is
    not an integer or outside ``0..num_classes-1`` (``params["num_classes"]``, default 10). One bad
    row never fails the day. An input without the columns it needs (``labels.csv`` without a
    ``label`` column) fails the task at once, naming the file and its columns: no retry can fix it.
    """
    from pyspark.sql import functions as F

    from airflow_provider_dltrain.etl.transform import require_columns

    size = int(params.get("image_size", IMAGE_SIZE))
    classes = int(params.get("num_classes", NUM_CLASSES))
    images = require_columns(inputs["images"], ["path", "content"], input_name="images")
    labels_in = require_columns(inputs["labels"], ["file", "label"], input_name="labels")
    images = images.select("path", "content")
    decoded = images.mapInPandas(
        lambda it: _decode_batches(it, size),
        "file string, source_file string, features array<float>, _error string",
    )
    decoded = decoded.unionByName(_empty_files(spark, inputs))
    # One row per file, whatever labels.csv holds: a duplicated file must not duplicate its image.
    labels = (
        labels_in.select(F.col("file"), F.trim(F.col("label").cast("string")).alias("raw"))
        .groupBy("file")
        .agg(F.count(F.lit(1)).alias("n_labels"), F.min("raw").alias("raw"))
    )
    joined = decoded.join(labels, on="file", how="left")
    # try_cast: a plain cast fails the whole job on one bad value under ANSI mode (CAST_INVALID_INPUT)
    value = F.expr("try_cast(raw AS BIGINT)")
    label_error = (
        F.when(F.col("n_labels").isNull(), F.lit("missing label in labels.csv"))
        .when(
            F.col("n_labels") > 1,
            F.format_string("%d labels for %s in labels.csv", F.col("n_labels"), F.col("file")),
        )
        .when(value.isNull(), F.format_string("label '%s' is not an integer", F.col("raw")))
        .when(
            (value < 0) | (value >= classes),
            F.format_string("label %d outside 0..%d", value, F.lit(classes - 1)),
        )
    )
    error = F.coalesce(F.col("_error"), label_error)
    label = F.when(F.col("n_labels") == 1, value)
    return joined.select("features", label.alias("label"), "source_file", error.alias("_error"))


def _empty_files(spark: Any, inputs: dict[str, Any]) -> Any:
    """Rows for the zero-byte images of the landing folder, which Spark's file sources skip silently.

    The folder is that of the images read (or ``images/`` beside ``labels.csv`` when none could be
    read), listed through Hadoop's FileSystem so that local, S3 and HDFS paths work alike.
    """
    import posixpath

    schema = "file string, source_file string, features array<float>, _error string"
    folders = {posixpath.dirname(p) for p in inputs["images"].inputFiles()}
    if not folders:
        folders = {posixpath.join(posixpath.dirname(p), "images") for p in inputs["labels"].inputFiles()}
    jvm: Any = getattr(spark, "_jvm", None)  # absent under Spark Connect: no listing there
    rows = []
    for folder in sorted(folders) if jvm is not None else []:
        path = jvm.org.apache.hadoop.fs.Path(folder)
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
        if not fs.exists(path):
            continue
        for status in fs.listStatus(path):
            name = status.getPath().getName()
            if status.isFile() and status.getLen() == 0 and name.lower().endswith(".png"):
                source = "/".join(str(status.getPath()).split("/")[-3:])
                rows.append((name, source, None, "empty file"))
    return spark.createDataFrame(rows, schema)
