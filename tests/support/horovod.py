"""Horovod for the tests that train through it, built beside the suite instead of before it.

On a new machine Horovod compiles from source (about 10 minutes on 2 cores, see
docker/jobs/build_horovod.sh). ``make test`` starts that build in the background with the test images
after it, sets ``DLTRAIN_HOROVOD_MARK`` to the file the build writes when Horovod is installed, and the
tests that need Horovod (marked ``horovod``, run after the others) wait for it through the ``horovod``
fixture. A failed build fails those tests, naming its log; outside ``make test`` (no mark set) they
are skipped when Horovod is not installed, as before.
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path

import pytest

MARK_ENV = "DLTRAIN_HOROVOD_MARK"
WAIT_S = 40 * 60


def horovod_available() -> bool:
    """Whether ``horovod.torch`` imports, once the build beside the suite (if any) is done."""
    try:
        wait_for_horovod()
    except pytest.skip.Exception:
        return False
    return True


def wait_for_horovod() -> None:
    """Return once ``horovod.torch`` imports; fail (under make test) or skip (elsewhere) if it cannot."""
    mark = os.environ.get(MARK_ENV)
    if mark:
        failed, log = Path(mark + ".failed"), os.environ.get("DLTRAIN_HOROVOD_LOG", "the build's log")
        deadline = time.monotonic() + WAIT_S
        while not Path(mark).exists():
            if failed.exists():
                pytest.fail(f"the Horovod build beside the suite failed: see {log}")
            if time.monotonic() > deadline:
                pytest.fail(f"Horovod was not built within {WAIT_S // 60} minutes: see {log}")
            time.sleep(2)
        importlib.invalidate_caches()  # installed after this process started
    pytest.importorskip("horovod.torch", reason="Horovod is built by `make horovod` (make test does it)")


@pytest.fixture(scope="session")
def horovod() -> None:
    """Horovod is importable in this process and in the processes it starts (see the module's docstring)."""
    wait_for_horovod()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "horovod: trains through Horovod (built beside the suite by make test): runs after the rest",
    )
