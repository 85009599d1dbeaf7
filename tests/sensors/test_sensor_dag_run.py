"""The sensor inside a real Airflow run (``airflow dags test``): poke and deferrable modes, XCom out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

DAG_FILE = """
from __future__ import annotations

import json
import subprocess
import sys

from airflow.sdk import DAG, task

from airflow_provider_dltrain.sensors import DeltaTableVersionSensor

URI = {uri!r}
OUT = {out!r}
WRITE = {write!r}

with DAG("dltrain_sensor_e2e", schedule=None, catchup=False):

    @task
    def commit_later() -> dict:
        from airflow_provider_dltrain.lake import latest

        # a writer that commits while the sensors wait
        subprocess.Popen([sys.executable, "-c", WRITE])
        return latest(URI).to_dict()

    seen = commit_later()
    deferred = DeltaTableVersionSensor(
        task_id="wait_deferred", table_uri=URI, newer_than=seen, aws_conn_id=None,
        deferrable=True, poll_interval=0.5, timeout=60,
    )
    poked = DeltaTableVersionSensor(
        task_id="wait_poke", table_uri=URI, partition={{"ds": "2026-11-29"}}, aws_conn_id=None,
        poll_interval=0.5, timeout=60,
    )
    deferred >> poked  # the poke starts while the second commit is still to come

    @task
    def record(deferred_ref: dict, poked_ref: dict) -> None:
        with open(OUT, "w") as handle:
            json.dump({{"deferred": deferred_ref, "poke": poked_ref}}, handle)

    record(deferred.output, poked.output)
"""

WRITE = """
import time
import pyarrow as pa
from airflow_provider_dltrain.lake import overwrite_partition
time.sleep(5)  # long enough for the deferrable sensor to have deferred, even on a busy machine
overwrite_partition({uri!r}, pa.table({{"x": [1]}}), {{"ds": "2026-11-28"}})
time.sleep(3)
overwrite_partition({uri!r}, pa.table({{"x": [1]}}), {{"ds": "2026-11-29"}})
"""


@pytest.mark.slow
def test_sensors_return_the_version_committed_while_they_wait_in_a_real_dag_run(
    airflow_db, tmp_path, write_version
):
    uri = str(tmp_path / "events")
    first = write_version(uri, "2026-11-27")
    dags = tmp_path / "dags"
    dags.mkdir()
    out = tmp_path / "refs.json"
    write = textwrap.dedent(WRITE.format(uri=uri))
    (dags / "sensor_e2e.py").write_text(DAG_FILE.format(uri=uri, out=str(out), write=write))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}

    run = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "dltrain_sensor_e2e"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert out.exists(), run.stdout[-4000:] + run.stderr[-4000:]
    refs = json.loads(out.read_text())
    assert refs["deferred"]["version"] == first.version + 1  # the first commit newer than `seen`
    assert refs["poke"]["version"] == first.version + 2  # the commit that added ds=2026-11-29
    assert refs["deferred"]["uri"] == refs["poke"]["uri"] == uri
    assert "running trigger in line" in run.stdout + run.stderr  # it really deferred
