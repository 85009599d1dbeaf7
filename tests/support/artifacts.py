"""Where a test keeps what a person looks at afterwards (screenshots, service logs)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def artifact_dir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, name: str, what: str
) -> Iterator[Path]:
    """``$DLTRAIN_TEST_ARTIFACTS/<name>`` (or a temp dir); says where at the end of the run."""
    root = os.environ.get("DLTRAIN_TEST_ARTIFACTS")
    path = Path(root) / name if root else tmp_path_factory.mktemp(name)
    path.mkdir(parents=True, exist_ok=True)
    yield path
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\n{what}: {path}")
