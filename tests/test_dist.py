"""The built wheel installs into a bare venv and the provider imports from it, as a user gets it.

What it proves: the wheel holds every module the provider's import surface needs (operators, sensors,
hooks, triggers, the ``dltrain`` command), its entry points (Airflow's provider info, the pytest
plugin, the console script), and that the versions in the constraints file satisfy what the wheel
declares for ``[all]``. What it does not: resolving those dependencies from the registry. To stay
fast and offline, the venv gets the wheel with ``--no-deps`` and sees the dependencies of this
project's ``.venv`` through a ``.pth`` line (which adds that folder but runs none of its own ``.pth``
files, so the editable install of the working tree stays out of sight).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).with_name("uv")

pytestmark = pytest.mark.skipif(not UV.exists(), reason="uv (the dev extra) builds the wheel")

CHECK = """
import importlib.metadata as md, json, sys
import airflow_provider_dltrain as p
from airflow_provider_dltrain import get_provider_info
from airflow_provider_dltrain.operators import SparkToDeltaOperator, TrainModelOperator
from airflow_provider_dltrain.sensors import DeltaTableVersionSensor
from airflow_provider_dltrain.triggers import DeltaTableNewVersionTrigger
dist = md.distribution("airflow-provider-dltrain")
eps = {(e.group, e.name): e.value for e in dist.entry_points}
print(json.dumps({"file": p.__file__, "info": get_provider_info(), "eps": sorted(map(list, eps)),
                  "provider_ep": eps[("apache_airflow_provider", "provider_info")],
                  "requires": dist.requires}))
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120, **kwargs)


def test_the_wheel_installed_in_a_bare_venv_imports_the_provider_and_its_entry_points(tmp_path):
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    _run([str(UV), "build", "--wheel", "--no-build-isolation", "--python", sys.executable, "--out-dir",
          str(dist), str(REPO)], cwd=REPO)  # fmt: skip
    (wheel,) = dist.glob("airflow_provider_dltrain-*.whl")
    _run([str(UV), "venv", "--python", sys.executable, str(venv)])
    py = venv / "bin" / "python"
    _run([str(UV), "pip", "install", "--no-deps", "--python", str(py), str(wheel)])
    site = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "dependencies-of-dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = json.loads(_run([str(py), "-c", CHECK], cwd=tmp_path, env=env).stdout.splitlines()[-1])
    assert out["file"].startswith(str(site)), out["file"]  # the wheel's copy, not the working tree
    assert out["info"]["package-name"] == "airflow-provider-dltrain"
    assert out["provider_ep"] == "airflow_provider_dltrain:get_provider_info"
    assert ["pytest11", "airflow_provider_dltrain.testing.pytest_plugin"] in out["eps"]
    assert "fake-aws" in _run([str(venv / "bin" / "dltrain"), "--help"], cwd=tmp_path, env=env).stdout

    # every requirement of [all], in the versions the constraints file pins (installed in .venv)
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    reqs = [Requirement(text) for text in out["requires"]]
    # a cell of make test-compat names the extras it installed (no torch there): check those
    extras = set(os.environ.get("DLTRAIN_EXTRAS", "all").split(","))
    for req in reqs:  # [all] (and [dev]) name other extras
        if (
            req.name == "airflow-provider-dltrain"
            and req.marker
            and any(req.marker.evaluate({"extra": e}) for e in set(extras))
        ):
            extras |= req.extras
    unmet = []
    for req in reqs:
        wanted = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras)
        if not wanted or req.name == "airflow-provider-dltrain":
            continue
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                unmet.append(f"{req} (installed {version(req.name)})")
        except PackageNotFoundError:
            unmet.append(f"{req} (not installed)")
    assert {"ray", "optuna", "testing", "aws"} <= extras, extras
    assert not unmet, unmet
