"""The support matrix: every Airflow, Python and lowest dependency version the package declares, run.

    python compat/matrix.py lock [CELL...]    resolve each cell's constraints file (uv pip compile)
    python compat/matrix.py test [CELL...]    build each cell's venv and run its checks (make test-compat)
    python compat/matrix.py smoke             the floor cell's quick check (.ci/run: make test-compat-smoke)

A cell is a Python, an Airflow minor, a set of extras and a constraints file under constraints/. Its
venv lives in .venv-compat/<cell> (the main cell uses .venv, which `make install` builds) and is
rebuilt only when its constraints file or pyproject.toml changed. docs/install.md shows the matrix.
Standard library only: it runs before any cell exists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UV = REPO / ".venv" / "bin" / "uv"
# Every extra but torch: the only CPU build of torch this project installs is 2.13.0 for Python 3.11
# (see docs/install.md); any other torch from the registry is a multi-GB CUDA build.
NO_TORCH = "aws,spark,mlflow,sagemaker,openlineage,ray,kubeflow,optuna,wandb,dvc,testing"
# The SageMaker SDK 3 (sagemaker-core) caps importlib-metadata below 7, which Airflow 3.2+ requires on
# Python 3.12 and later: the sagemaker extra installs on Python 3.10 and 3.11 only.
NO_TORCH_NO_SAGEMAKER = NO_TORCH.replace("sagemaker,", "")
# What the checks need besides the package: pytest comes with the testing extra, at the cell's version.
TEST_TOOLS = ("pytest-timeout>=2.3", "hypothesis>=6.100", "PyYAML>=6", "uv==0.13.9", "scikit-learn>=1.3")


@dataclass(frozen=True)
class Cell:
    name: str
    python: str
    airflow: str
    extras: str
    constraints: str
    resolution: str = "highest"
    torch: bool = False  # the demo trains (dltrain_retrain) only where torch is installed
    deselect: tuple[str, ...] = ()  # tests this cell cannot run, each with its reason where it is named
    pins: tuple[str, ...] = ()  # what Airflow's own constraints for its version hold, where newest breaks it

    @property
    def venv(self) -> Path:
        return REPO / (".venv" if self.name == "main" else f".venv-compat/{self.name}")

    @property
    def py(self) -> Path:
        return self.venv / "bin" / "python"


# Airflow 3.1 in unit-test mode (AIRFLOW__CORE__UNIT_TEST_MODE, which tests/conftest.py sets) finds no
# connection defined by an AIRFLOW_CONN_* variable ("Unable to find AWS Connection ID"); without that mode
# it does, as Airflow 3.2+ does in both. These tests define their moto connection that way.
AIRFLOW_31_UNIT_TEST_MODE = (
    "tests/sensors/test_version_sensor.py::test_sensor_waits_for_an_s3_table_on_moto_in_both_modes",
    "tests/sensors/test_version_trigger.py::test_trigger_finds_an_s3_table_on_moto_through_the_aws_connection",
)

# Airflow 3.2.2 leaves FastAPI and svcs uncapped, and `airflow dags test` fails on its first task with the
# newest of either: FastAPI 0.165 ("Model 'TITerminalStatePayload' needs a discriminator field"), svcs 26
# ("'State' object has no attribute 'svcs_registry'" from its execution API). 3.3.2 runs with both (and caps
# FastAPI below 0.137). A deployment installs Airflow with its own constraints file, which holds the
# versions of its release; so does this cell.
AIRFLOW_32_PINS = ("fastapi<0.137", "svcs<26")

CELLS = {
    c.name: c
    for c in (
        # the floor: the oldest Airflow minor (its newest patch), the oldest Python, and every direct
        # dependency at the lowest version pyproject.toml declares
        Cell(
            "floor",
            "3.10",
            "3.1.8",
            NO_TORCH,
            "constraints/compat-floor-py3.10.txt",
            "lowest-direct",
            deselect=AIRFLOW_31_UNIT_TEST_MODE,
        ),
        Cell(
            "airflow-3.2",
            "3.12",
            "3.2.2",
            NO_TORCH_NO_SAGEMAKER,
            "constraints/compat-airflow3.2-py3.12.txt",
            pins=AIRFLOW_32_PINS,
        ),
        Cell(
            "airflow-3.3", "3.13", "3.3.2", NO_TORCH_NO_SAGEMAKER, "constraints/compat-airflow3.3-py3.13.txt"
        ),
        # what make install builds: the pins every other command of the project uses
        Cell("main", "3.11", "3.3.2", "all,dev", "constraints/constraints-3.11.txt", torch=True),
    )
}

# The quick tier's tests that a version change can break without torch: the Airflow layer's imports,
# sensors and triggers (the authoring API that moves between minors), Delta reads and writes (deltalake,
# pyarrow), the landing zone's listing (Python's glob), the operators' input checks, the DAG integrity
# tests and the wheel install test. Spark, the Airflow task runner and the metadata DB: the demo's run.
TESTS = (
    "tests/test_airflow_compat.py",
    "tests/test_provider_package.py",
    "tests/dags/test_dag_integrity.py",
    "tests/sensors/test_version_sensor.py",
    "tests/sensors/test_sensor_modes.py",
    "tests/sensors/test_cutoff_pin.py",
    "tests/sensors/test_version_trigger.py",
    "tests/lake/test_ref_and_log.py",
    "tests/lake/test_partition_overwrite.py",
    "tests/etl/test_landing_hazards.py",
    "tests/etl/test_operator_input_checks.py",
    "tests/test_dist.py",
)
# The smoke .ci/run runs on the floor, beside make test: imports, the DAGs' parse, then the demo's first
# date, in a venv of the floor's pins with only the extras these need (a third of the floor's install).
SMOKE_TESTS = ("tests/test_airflow_compat.py", "tests/dags/test_dag_integrity.py")
SMOKE_EXTRAS = "aws,spark,testing"
DEMO_DATE = "2026-11-24"


def run(cmd: list[str | Path], **kwargs) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=REPO, **kwargs)


def requirements(cell: Cell) -> list[str]:
    """The cell's install: the working tree (editable) with its extras, its Airflow, the test tools."""
    return ["-e", f"{REPO}[{cell.extras}]", f"apache-airflow=={cell.airflow}", *cell.pins, *TEST_TOOLS]


def lock(cell: Cell) -> None:
    """Resolve the cell's constraints file from pyproject.toml (the main cell's is `make constraints`)."""
    if cell.name == "main":
        raise SystemExit("the main cell's constraints are `make constraints`'s")
    with tempfile.NamedTemporaryFile("w", suffix=".in") as spec:
        spec.write("\n".join(line for line in requirements(cell) if line != "-e") + "\n")
        spec.flush()
        run([UV, "pip", "compile", "-q", "--python-version", cell.python, "--resolution", cell.resolution,
             "--no-emit-package", "airflow-provider-dltrain", "--no-header", "--no-annotate",
             spec.name, "-o", cell.constraints])  # fmt: skip
    pins = (REPO / cell.constraints).read_text()
    header = (
        f"# cell {cell.name}: Python {cell.python}, Airflow {cell.airflow}, extras [{cell.extras}], "
        f"resolution {cell.resolution}\n# written by `python compat/matrix.py lock {cell.name}`\n"
    )
    (REPO / cell.constraints).write_text(header + pins)


def interpreter(version: str) -> str:
    """The machine's Python ``version``: pyenv's build of it (docs/install.md), else ``pythonX.Y`` on PATH."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(pyenv.glob(f"{version}.*/bin/python{version}")) + [
        Path(p) for p in [shutil.which(f"python{version}")] if p
    ]
    for candidate in found:
        if subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return str(candidate)
    raise SystemExit(
        f"no Python {version} on this machine: install it (pyenv install {version}) for this cell"
    )


def fingerprint(cell: Cell) -> str:
    text = (REPO / cell.constraints).read_bytes() + (REPO / "pyproject.toml").read_bytes()
    return hashlib.sha256(text + "\n".join(requirements(cell)).encode()).hexdigest()[:16]


def build(cell: Cell) -> None:
    """Create the cell's venv from its constraints file, unless one from the same inputs exists."""
    if cell.name == "main":
        run(["make", "install"])
        return
    mark = cell.venv / f".installed-{fingerprint(cell)}"
    if mark.exists():
        return
    shutil.rmtree(cell.venv, ignore_errors=True)
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}  # hard links into uv's cache: seconds, not copies
    run([UV, "venv", "-q", "--python", interpreter(cell.python), cell.venv], env=env)
    run([UV, "pip", "install", "-q", "--python", cell.py, "-c", cell.constraints,
         *requirements(cell)], env=env)  # fmt: skip
    mark.touch()


def check_env(cell: Cell) -> dict[str, str]:
    # tests/test_dist.py checks the requirements of the extras this venv was installed with
    return {**os.environ, "DLTRAIN_EXTRAS": cell.extras}


def pytest(cell: Cell, tests: tuple[str, ...]) -> None:
    run([cell.py, "-m", "pytest", "-p", "no:xdist", "-q", "-m", "not slow and not cluster",
         "-p", "no:cacheprovider", *(f"--deselect={t}" for t in cell.deselect), *tests],
        env=check_env(cell))  # fmt: skip


def demo(cell: Cell) -> None:
    """The demo's first date in a throw-away home: ingest, and retrain where the cell has torch."""
    dags = '("dltrain_ingest", "dltrain_retrain")' if cell.torch else '("dltrain_ingest",)'
    code = (
        "import sys, datetime\nfrom airflow_provider_dltrain.demo.orchestrate import run_demo\n"
        f"sys.exit(run_demo(datetime.date.fromisoformat({DEMO_DATE!r}), 1, {dags}))\n"
    )
    with tempfile.TemporaryDirectory(prefix=f"dltrain-compat-{cell.name}-") as home:
        run([cell.py, "-c", code], env={**check_env(cell), "DLTRAIN_HOME": home})


def timed(label: str, step) -> float:
    began = time.monotonic()
    step()
    seconds = time.monotonic() - began
    print(f"== {label}: {seconds:.0f} s", flush=True)
    return seconds


def test(cell: Cell) -> None:
    timed(f"{cell.name} build", lambda: build(cell))
    timed(f"{cell.name} tests", lambda: pytest(cell, TESTS))
    timed(f"{cell.name} demo {DEMO_DATE}", lambda: demo(cell))


def smoke() -> None:
    cell = replace(CELLS["floor"], name="floor-smoke", extras=SMOKE_EXTRAS)
    timed("floor build", lambda: build(cell))
    timed("floor imports and DAG parse", lambda: pytest(cell, SMOKE_TESTS))
    timed(f"floor demo {DEMO_DATE}", lambda: demo(cell))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lock", "test", "smoke"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "smoke":
        smoke()
        return 0
    names = argv[1:] or [n for n in CELLS if not (argv[0] == "lock" and n == "main")]
    unknown = sorted(set(names) - set(CELLS))
    if unknown:
        print(f"unknown cell(s) {unknown}: the cells are {sorted(CELLS)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:  # one at a time: the machine has two cores
        try:
            (lock if argv[0] == "lock" else test)(CELLS[name])
        except subprocess.CalledProcessError as err:
            print(f"== {name}: FAILED ({err})", flush=True)
            failed.append(name)
    print(f"== cells {'failed: ' + ', '.join(failed) if failed else 'passed: ' + ', '.join(names)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
