"""The contract searched: generated histories of a table, every date checked after every step.

``make test`` runs the ``ci`` profile: a fixed seed (the same histories on every machine), 200
histories of 30 steps. ``make soak MINUTES=30 SEED=7`` runs the ``soak`` profile: new seeds from
SEED on, until MINUTES are up. A failure prints the seed, the shrunk history as a runnable program
(``state = LakeHistory()`` and its steps) and the ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import seed as with_seed
from hypothesis.stateful import run_state_machine_as_test

from tests.contract.contract_checks import contract_settings
from tests.contract.harness import FOUND, STATS, STEPS, LakeHistory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy(
        "200 generated histories of 30 steps, each step checked on real files (about 85 s of CPU under load)"
    ),
]

HISTORIES = int(os.environ.get("DLTRAIN_CONTRACT_HISTORIES", "200"))
SEED = int(os.environ.get("DLTRAIN_CONTRACT_SEED", "46"))
SOAK_MINUTES = float(os.environ.get("DLTRAIN_CONTRACT_MINUTES", "0"))


def _run(seed: int, histories: int) -> None:
    machine = with_seed(seed)(type("LakeHistory", (LakeHistory,), {}))
    started, first = time.monotonic(), STATS["started"]
    try:
        run_state_machine_as_test(
            machine, settings=contract_settings(histories, steps=STEPS + 1)
        )  # + the creation
    except BaseException as err:
        if FOUND:
            err.add_note(
                f"found in history {int(FOUND['history']) - first} of this seed, "
                f"{FOUND['at'] - started:.1f} s after it started (then shrunk)"
            )
        err.add_note(
            f"contract history seed {seed} (DLTRAIN_CONTRACT_SEED={seed}); run it again with "
            f"`make soak MINUTES=1 SEED={seed}` or paste the printed steps into a test"
        )
        raise


@pytest.mark.skipif(SOAK_MINUTES > 0, reason="the soak runs test_soak_finds_no_history_breaking_the_contract")
def test_generated_histories_give_each_date_the_contracts_answer() -> None:
    before = dict(STATS)
    started = time.monotonic()
    seed = SEED
    # Hypothesis ends some generated histories early (its choice buffer is full): run seeds SEED,
    # SEED+1, ... until HISTORIES histories of STEPS steps have run (the same ones on every machine)
    while STATS["histories"] - before["histories"] < HISTORIES:
        _run(seed, HISTORIES - (STATS["histories"] - before["histories"]))
        seed += 1
    from tests.contract.harness import SURVEY_FOUND

    for kind, found in sorted(SURVEY_FOUND.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(found):5d}  {kind}\n       e.g. {found[0][:400]}")
    histories = STATS["histories"] - before["histories"]
    steps = STATS["steps"] - before["steps"]
    print(f"{histories} histories, {steps} checked steps in {time.monotonic() - started:.1f} s (seed {SEED})")
    assert histories >= HISTORIES, f"only {histories} histories of {STEPS} steps ran"


@pytest.mark.skipif(SOAK_MINUTES <= 0, reason="make soak sets DLTRAIN_CONTRACT_MINUTES")
def test_soak_finds_no_history_breaking_the_contract() -> None:
    deadline = time.monotonic() + SOAK_MINUTES * 60 * 0.8  # the DVC histories get the rest
    seed = SEED
    while time.monotonic() < deadline:
        _run(seed, 50)
        seed += 1
    print(f"soak: {STATS['histories']} histories, {STATS['steps']} checked steps, seeds {SEED}..{seed - 1}")
