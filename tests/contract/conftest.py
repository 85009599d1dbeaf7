"""The generated histories log warnings by the thousand (log retention, inferred writes): quiet for
these tests only. Set at import, it silenced every later test's ``caplog`` in the same worker."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_provider_warnings():
    logger = logging.getLogger("airflow_provider_dltrain")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)
