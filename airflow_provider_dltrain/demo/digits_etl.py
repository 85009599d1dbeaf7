"""The demo's ETL transform: a day's digit PNGs + labels file → normalised pixel rows.

Follows the transform contract ``transform(spark, inputs, params) -> DataFrame``. Rows that cannot
be used get a reason in ``_error`` and go to quarantine instead of the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

IMAGE_SIZE = 8
NUM_CLASSES = 10
MAX_PIXELS = 4096 * 4096  # params["max_pixels"]: checked from the header, before any decoding


def decode_png(
    content: bytes, size: int, max_pixels: int = MAX_PIXELS
) -> tuple[list[float] | None, str | None]:
    """``(pixels in 0..1, None)``, or ``(None, reason)`` for a file that cannot be a digit.

    The dimensions come from the PNG header (``Image.open`` decodes nothing): an image over
    ``max_pixels`` or not ``size`` x ``size`` is refused before a pixel is decoded, so a tiny file
    claiming 13000x13000 pixels costs no memory.
    """
    import io

    import numpy as np
    from PIL import Image

    if not content:
        return None, "empty file"
    try:
        with Image.open(io.BytesIO(content)) as img:
            width, height = img.size
            if width * height > max_pixels:
                return None, (
                    f"image is {width}x{height} ({width * height} pixels), over max_pixels={max_pixels}"
                )
            if img.size != (size, size):
                return None, f"image is {width}x{height}, expected {size}x{size}"
            img.load()
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


def _decode_batches(batches: Iterator[Any], size: int, max_pixels: int) -> Iterator[Any]:
    import pandas as pd

    for pdf in batches:
        decoded = [decode_png(bytes(c), size, max_pixels) for c in pdf["content"]]
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
    every run: an undecodable or empty file, an image over ``params["max_pixels"]`` (default
    4096x4096, read from the header before decoding) or not ``image_size`` square, no label, several
    labels for the file, a label that is not an integer or outside ``0..num_classes-1``
    (``params["num_classes"]``, default 10). A file the landing listing refused (a symbolic link,
    a hidden ``.``/``_`` name) never reaches it: the write quarantines it. One bad row never fails the day. An input without the columns it needs (``labels.csv`` without a
    ``label`` column) fails the task at once, naming the file and its columns: no retry can fix it.
    """
    from pyspark.sql import functions as F

    from airflow_provider_dltrain.etl.transform import require_columns

    size = int(params.get("image_size", IMAGE_SIZE))
    classes = int(params.get("num_classes", NUM_CLASSES))
    max_pixels = int(params.get("max_pixels", MAX_PIXELS))
    images = require_columns(inputs["images"], ["path", "content"], input_name="images")
    labels_in = require_columns(inputs["labels"], ["file", "label"], input_name="labels")
    images = images.select("path", "content")
    decoded = images.mapInPandas(
        lambda it: _decode_batches(it, size, max_pixels),
        "file string, source_file string, features array<float>, _error string",
    )
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
