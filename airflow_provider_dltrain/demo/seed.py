"""Seed a landing zone with daily folders of 8x8 digit PNGs and a labels file (no download).

The images come from the handwritten-digits data set that ships inside scikit-learn. Every day gets
the same deliberately broken files, so the quarantine path is always exercised: a truncated PNG, an
image of the wrong size and an image without a label.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from dataclasses import dataclass
from datetime import date, timedelta

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


def seed_day(landing: str, ds: str, per_day: int = PER_DAY, force: bool = False) -> SeedDay:
    """Write one day's images and ``labels.csv`` (idempotent: an existing seeded day is kept)."""
    from sklearn.datasets import load_digits

    folder = day_dir(landing, ds)
    if os.path.exists(os.path.join(folder, MARKER)) and not force:
        n = len(os.listdir(os.path.join(folder, "images")))
        return SeedDay(ds, folder, n, len(BROKEN), False)
    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round()
    offset = (date.fromisoformat(ds).toordinal() * 397) % len(images)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    rows = []
    for i in range(per_day):
        idx = (offset + i) % len(images)
        name = f"img_{i:04d}.png"
        with open(os.path.join(folder, "images", name), "wb") as fh:
            fh.write(_png(images[idx]))
        rows.append((name, int(digits.target[idx])))
    good = _png(images[offset])
    with open(os.path.join(folder, "images", "bad_truncated.png"), "wb") as fh:
        fh.write(good[: len(good) // 2])
    with open(os.path.join(folder, "images", "bad_size.png"), "wb") as fh:
        fh.write(_png(images[offset], size=9))
    with open(os.path.join(folder, "images", "no_label.png"), "wb") as fh:
        fh.write(good)
    rows += [("bad_truncated.png", int(digits.target[offset])), ("bad_size.png", int(digits.target[offset]))]
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
