"""Seed a landing zone with daily folders of 8x8 digit PNGs and a labels file (no download).

The images come from the handwritten-digits data set that ships inside scikit-learn. Every day gets
the same deliberately broken files, so the quarantine path is always exercised: a truncated PNG, an
image of the wrong size and an image without a label.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import logging
import os
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

log = logging.getLogger(__name__)

PER_DAY = 400
BROKEN = ("bad_truncated.png", "bad_size.png", "no_label.png")
MARKER = "_SEEDED"


@dataclass(frozen=True)
class SeedDay:
    ds: str
    path: str
    images: int
    broken: int
    created: bool


def _png(pixels, size: int = 8) -> bytes:
    from PIL import Image

    img = Image.fromarray(pixels.astype("uint8"), mode="L")
    if size != 8:
        img = img.resize((size, size))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def day_dir(landing: str, ds: str) -> str:
    return os.path.join(landing, ds)


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[Any, Any]:
    """(images scaled to 0..255 as 8x8 arrays, labels) of scikit-learn's digits data set.

    Read from the CSV file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``: 64 pixel
    values 0..16, then the label, per row) without importing scikit-learn, whose import takes
    seconds; ``load_digits`` is the fallback where that file is not where it is expected.
    """
    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    path = (
        os.path.join(os.path.dirname(spec.origin or ""), "datasets", "data", "digits.csv.gz") if spec else ""
    )
    if path and os.path.isfile(path):
        data = np.loadtxt(path, delimiter=",")
        pixels, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        pixels, target = digits.images, digits.target
    return (pixels * (255.0 / 16.0)).round(), target


def seed_day(landing: str, ds: str, per_day: int = PER_DAY, force: bool = False) -> SeedDay:
    """Write one day's images and ``labels.csv`` (idempotent: an existing seeded day is kept)."""
    folder = day_dir(landing, ds)
    if os.path.exists(os.path.join(folder, MARKER)) and not force:
        n = len(os.listdir(os.path.join(folder, "images")))
        return SeedDay(ds, folder, n, len(BROKEN), False)
    images, labels = _digits()
    offset = (date.fromisoformat(ds).toordinal() * 397) % len(images)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    rows = []
    for i in range(per_day):
        idx = (offset + i) % len(images)
        name = f"img_{i:04d}.png"
        with open(os.path.join(folder, "images", name), "wb") as fh:
            fh.write(_png(images[idx]))
        rows.append((name, int(labels[idx])))
    good = _png(images[offset])
    with open(os.path.join(folder, "images", "bad_truncated.png"), "wb") as fh:
        fh.write(good[: len(good) // 2])
    with open(os.path.join(folder, "images", "bad_size.png"), "wb") as fh:
        fh.write(_png(images[offset], size=9))
    with open(os.path.join(folder, "images", "no_label.png"), "wb") as fh:
        fh.write(good)
    rows += [("bad_truncated.png", int(labels[offset])), ("bad_size.png", int(labels[offset]))]
    with open(os.path.join(folder, "labels.csv"), "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["file", "label"])
        writer.writerows(rows)
    with open(os.path.join(folder, MARKER), "w") as fh:
        fh.write(ds + "\n")
    log.info("seeded %s: %d images + %d broken files", folder, per_day, len(BROKEN))
    return SeedDay(ds, folder, per_day + len(BROKEN), len(BROKEN), True)


def seed(landing: str, start: date, days: int, per_day: int = PER_DAY) -> list[SeedDay]:
    """Seed ``days`` consecutive days starting at ``start``."""
    return [seed_day(landing, (start + timedelta(days=i)).isoformat(), per_day) for i in range(days)]
