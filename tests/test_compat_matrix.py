"""What pyproject.toml declares is what the support matrix (compat/matrix.py, docs/install.md) proves.

Milliseconds: these read files only. ``make test-compat`` runs the cells themselves.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compat_matrix", REPO / "compat" / "matrix.py")
matrix = sys.modules["compat_matrix"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(matrix)
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def pins(cell) -> dict[str, str]:
    lines = (REPO / cell.constraints).read_text().splitlines()
    pairs = (line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))
    return {name.strip().lower().replace("_", "-"): version.strip() for name, version in pairs}


def declared(extras: list[str]) -> list[Requirement]:
    reqs = [Requirement(text) for text in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(text) for text in PROJECT["optional-dependencies"][extra]]
    return [r for r in reqs if r.name != "airflow-provider-dltrain"]


def lowest(spec: SpecifierSet) -> str:
    (floor,) = [s.version for s in spec if s.operator in (">=", "==")]
    return floor


def test_the_floor_cell_installs_every_direct_dependency_at_its_declared_minimum():
    floor = matrix.CELLS["floor"]
    installed = pins(floor)
    # scikit-learn comes with [all]: the demo's data set
    reqs = declared(floor.extras.split(",")) + [r for r in declared(["all"]) if r.name == "scikit-learn"]
    differing = {
        r.name: (lowest(r.specifier), installed.get(r.name.lower()))
        for r in reqs
        if Version(installed.get(r.name.lower(), "0")) != Version(lowest(r.specifier))
    }
    assert not differing, (
        f"declared minimum vs the floor's pin (raise the minimum, or lock again): {differing}"
    )


def test_the_declared_airflow_range_spans_exactly_the_minors_of_the_cells():
    (airflow,) = [r for r in declared([]) if r.name == "apache-airflow"]
    versions = sorted(Version(c.airflow) for c in matrix.CELLS.values())
    assert lowest(airflow.specifier) == str(versions[0])
    assert Version(f"{versions[-1].major}.{versions[-1].minor}.9999") in airflow.specifier
    assert Version(f"{versions[-1].major}.{versions[-1].minor + 1}.0") not in airflow.specifier


def test_the_declared_python_range_spans_exactly_the_pythons_of_the_cells():
    requires = SpecifierSet(PROJECT["requires-python"])
    minors = sorted(int(c.python.split(".")[1]) for c in matrix.CELLS.values())
    assert [m for m in range(8, 16) if Version(f"3.{m}.0") in requires] == list(
        range(minors[0], minors[-1] + 1)
    )


def test_each_cell_constraints_file_pins_the_cells_airflow():
    for cell in matrix.CELLS.values():
        assert pins(cell).get("apache-airflow") == cell.airflow, cell.name


def test_the_declared_torch_minimum_is_the_torch_the_main_cell_installs():
    """No cell but main has a CPU torch (docs/install.md): its version is the proven floor."""
    (line,) = [x for x in (REPO / "Makefile").read_text().splitlines() if x.startswith("TORCH_VERSION ?=")]
    (torch,) = [r for r in declared(["torch"]) if r.name == "torch"]
    assert Version(lowest(torch.specifier)) == Version(line.split("?=")[1].strip())
