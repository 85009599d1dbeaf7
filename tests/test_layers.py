"""The package's layers (``[tool.importlinter]`` in pyproject.toml) hold, and place every module.

``make lint`` runs ``lint-imports`` too; this keeps the contracts in the suite CI runs, and makes a new
top-level module or package fail until it is given its place in the order.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import airflow_provider_dltrain

REPO = Path(__file__).resolve().parents[1]


def _layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_every_top_level_module_and_package_has_a_place_in_the_layers():
    placed = _layers()
    assert len(placed) == len(set(placed)), "a module is placed twice"
    found = {
        f"airflow_provider_dltrain.{m.name}" for m in pkgutil.iter_modules(airflow_provider_dltrain.__path__)
    }
    assert found - set(placed) == set(), "give each new module its layer in pyproject.toml"
    assert set(placed) - found == set(), "the layers name a module that no longer exists"


def test_no_module_of_any_package_folder_is_in_an_import_cycle_with_a_sibling():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "acyclic_siblings"]
    folders = {
        f"airflow_provider_dltrain.{m.name}"
        for m in pkgutil.iter_modules(airflow_provider_dltrain.__path__)
        if m.ispkg
    }
    assert folders - set(contract["ancestors"]) == set(), "add the package to the acyclic contract"


def test_the_import_contracts_are_kept():
    pytest.importorskip("importlinter")  # the dev extra: the compat cells' venvs go without it
    # in a process of its own: import-linter configures logging as a command line does
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
