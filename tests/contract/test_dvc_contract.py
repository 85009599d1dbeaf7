"""Generated histories of a DVC-versioned input (see :mod:`.dvc_history`): every date's nightly and
backfill pinned by the real resolver and checked against the oracle. 10 histories of 30 steps in
``make test`` (seed 46), more in ``make soak``."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("dvc.api")
from tests.contract.contract_checks import contract_settings, run_seeds
from tests.contract.dvc_history import STATS, DvcHistory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy(
        "a DVC repository built once, then one DVCFileSystem opened per resolve (about 13 s of CPU)"
    ),
]

HISTORIES = int(os.environ.get("DLTRAIN_CONTRACT_DVC_HISTORIES", "10"))
SEED = int(os.environ.get("DLTRAIN_CONTRACT_SEED", "46"))
MINUTES = float(os.environ.get("DLTRAIN_CONTRACT_MINUTES", "0") or 0)


def test_generated_dvc_histories_read_each_dates_nightly_input_or_refuse() -> None:
    started = time.monotonic()
    # the soak gives the DVC histories a fifth of its minutes
    config = contract_settings(HISTORIES + HISTORIES // 10, steps=31)
    run_seeds(DvcHistory, "DVC", config, SEED, MINUTES * 60 * 0.2)
    print(f"{STATS['histories']} DVC histories, {STATS['steps']} steps in {time.monotonic() - started:.1f} s")
    assert STATS["histories"] >= HISTORIES
