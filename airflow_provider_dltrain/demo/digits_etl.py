"""The demo's ETL transform: a day's digit PNGs + labels file → normalised pixel rows.

Follows the transform contract ``transform(spark, inputs, params) -> DataFrame``. Rows that cannot
be used get a reason in ``_error`` and go to quarantine instead of the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

IMAGE_SIZE = 8


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
    """Decode ``inputs["images"]`` (binaryFile) and join ``inputs["labels"]`` (CSV: file,label)."""
    from pyspark.sql import functions as F

    size = int(params.get("image_size", IMAGE_SIZE))
    images = inputs["images"].select("path", "content")
    decoded = images.mapInPandas(
        lambda it: _decode_batches(it, size),
        "file string, source_file string, features array<float>, _error string",
    )
    labels = inputs["labels"].select(F.col("file"), F.col("label").cast("long").alias("label"))
    joined = decoded.join(labels, on="file", how="left")
    error = F.coalesce(F.col("_error"), F.when(F.col("label").isNull(), F.lit("missing label in labels.csv")))
    return joined.select("features", "label", "source_file", error.alias("_error"))
