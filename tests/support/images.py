"""The images of ``docker/images.py`` for the tests that run them (the container tier, the stack)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def builder() -> ModuleType:
    """``docker/images.py`` as a module (it is a script of the repository, not of the package)."""
    name = "dltrain_images"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "docker" / "images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def ensure_images(names: list[str]) -> dict[str, str]:
    """The tags of ``names``, built when missing (waiting for a build in progress); fails clearly without Docker."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("these tests need a running Docker daemon: `make test` starts one (make dockerd)")
    return dict(builder().ensure(names))
