from __future__ import annotations

import os
import subprocess
import sys


def test_airflow_providers_list_shows_the_provider():
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "airflow-provider-dltrain" in out


def test_provider_info_package_name_equals_the_distribution_name():
    from importlib.metadata import distribution

    from airflow_provider_dltrain import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == distribution("airflow-provider-dltrain").metadata["Name"]
    assert info["versions"] == [distribution("airflow-provider-dltrain").version]


def test_importing_operators_sensors_and_triggers_loads_no_heavy_library():
    code = (
        "import sys\n"
        "from airflow_provider_dltrain.operators import SparkToDeltaOperator\n"
        "from airflow_provider_dltrain.sensors import DeltaTableVersionSensor\n"
        "from airflow_provider_dltrain.triggers import DeltaTableVersionTrigger\n"
        "import airflow_provider_dltrain.operators as ops\n"
        "[getattr(ops, n) for n in ops.__all__]\n"
        "heavy = [m for m in ('pyspark', 'deltalake', 'torch', 'mlflow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_python_dash_m_and_the_console_command_are_the_same_cli():
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "demo" in out and "lineage" in out
