"""Generated histories of a DVC-versioned input (see :mod:`.dvc_history`): every date's nightly and
backfill pinned by the real resolver and checked against the oracle. 10 histories of 30 steps in
``make test`` (seed 46), more in ``make soak``."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import seed as with_seed
from hypothesis.stateful import run_state_machine_as_test

pytest.importorskip("dvc.api")
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
    seed = SEED
    while True:
        machine = with_seed(seed)(type("DvcHistory", (DvcHistory,), {}))
        config = settings(
            max_examples=HISTORIES + HISTORIES // 10,
            stateful_step_count=31,
            deadline=None,
            database=None,
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        )
        try:
            run_state_machine_as_test(machine, settings=config)
        except BaseException as err:
            err.add_note(f"DVC contract history seed {seed} (DLTRAIN_CONTRACT_SEED={seed})")
            raise
        seed += 1
        if time.monotonic() - started > MINUTES * 60 * 0.2:  # the soak gives the DVC histories a fifth
            break
    print(f"{STATS['histories']} DVC histories, {STATS['steps']} steps in {time.monotonic() - started:.1f} s")
    assert STATS["histories"] >= HISTORIES
