"""Test tables built from sklearn's 1,797 digit images, one partition per ``ds``."""

from __future__ import annotations

from collections.abc import Sequence

DAYS = ("2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28")


def digits_partition(day_index: int, days: int):
    """Rows ``day_index::days`` of the digits set as the ingest table's schema (pyarrow table)."""
    import numpy as np
    import pyarrow as pa
    from sklearn.datasets import load_digits

    digits = load_digits()
    rows = np.arange(len(digits.target))[day_index::days]
    features = (digits.data[rows] / 16.0).astype("float32")
    return pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                pa.list_(pa.float32())
            ),
            "label": pa.array(digits.target[rows].astype("int64")),
            "source_file": pa.array([f"digits/{i:05d}.png" for i in rows]),
        }
    )


def write_digits(uri: str, days: Sequence[str] = DAYS):
    """Write one partition per day; return the DeltaRef of the last commit."""
    from airflow_provider_dltrain import lake

    ref = None
    for i, day in enumerate(days):
        ref = lake.overwrite_partition(uri, digits_partition(i, len(days)), {"ds": day})
    return ref
