"""Shared data and expectations of the inference tests (imported by tests and fixtures)."""

from __future__ import annotations

from typing import Any

N_FEATURES, N_CLASSES = 64, 10
DAYS = ("2026-11-27", "2026-11-28")
ROWS_PER_DAY = 1_500


def features(n: int, seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed).normal(size=(n, N_FEATURES)).astype("float32")


def arrow_rows(x: Any, first_id: int) -> Any:
    import numpy as np
    import pyarrow as pa

    flat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), N_FEATURES).cast(pa.list_(pa.float32()))
    return pa.table({"id": pa.array(np.arange(first_id, first_id + len(x)), pa.int64()), "features": flat})


def expected(module: Any, x: Any) -> tuple[Any, Any]:
    """(prediction, score) the way the scorer defines them, computed in-process."""
    import torch

    with torch.inference_mode():
        probs = torch.softmax(module(torch.from_numpy(x)), dim=1)
    score, label = probs.max(dim=1)
    return label.numpy(), score.double().numpy()
