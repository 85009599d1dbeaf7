"""Connection secrets never reach task logs, XComs, trigger kwargs or MLflow params/tags.

One demo date (ingest, then retrain with a small model) runs through the ``airflow dags test`` code
path with an ``aws`` and an ``mlflow`` connection defined by ``AIRFLOW_CONN_*`` JSON holding
distinctive secrets; then every file the run left (task logs, the Airflow DB, the MLflow store and
artifacts, run directories), every XCom value, every trigger's decrypted kwargs and every MLflow
param and tag are searched for them.

The retrain DAG trains with ``DLTRAIN_TRAIN_BACKEND=horovod`` (2 ranks under ``horovodrun``) when
Horovod is built (``make test`` builds it): the credentials then also travel to the ranks, and the
same run shows that the retrain DAG trains, registers and scores with Horovod.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from tests.support.horovod import horovod_available

# Horovod is built beside the suite (tests/support/horovod.py): after the files that do not need it
pytestmark = [pytest.mark.slow, pytest.mark.horovod]

AWS_SECRET = "awsSECRETkey-e2e-7Qz9Lw"
MLFLOW_PASSWORD = "mlflowPASSWORD-e2e-4Kd8Rv"
SECRETS = (AWS_SECRET, MLFLOW_PASSWORD)
DS = "2026-11-24"
PER_DAY = 120
FAST = {"epochs": 2, "batch_size": 32, "lr": 0.003, "seed": 7}
_TRIGGER_KWARGS = """
import json
from airflow.models.trigger import Trigger
from airflow.utils.session import create_session
with create_session() as session:
    print(json.dumps([t.kwargs for t in session.query(Trigger).all()], default=str))
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    home = tmp_path_factory.mktemp("secrets") / "home"
    old = os.environ.get("DLTRAIN_HOME")
    os.environ["DLTRAIN_HOME"] = str(home)
    try:
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags
        from airflow_provider_dltrain.demo.seed import seed

        seed(paths.landing(), date.fromisoformat(DS), 1, per_day=PER_DAY)
        env = airflow_env()
        env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAE2ETESTKEY000000",
                "password": AWS_SECRET,
                "extra": {"region_name": "us-east-1"},
            }
        )
        env["AIRFLOW_CONN_MLFLOW_DEFAULT"] = json.dumps(
            {"conn_type": "mlflow", "host": paths.mlflow_uri(), "login": "alice", "password": MLFLOW_PASSWORD}
        )
        # without Horovod (outside make test) the secrets tests still run, on the DAG's default DDP backend
        HOROVOD = horovod_available()
        if HOROVOD:
            env["DLTRAIN_TRAIN_BACKEND"] = "horovod"
            env["DLTRAIN_TRAIN_BACKEND_OPTIONS"] = json.dumps({"num_processes": 2})
        ensure_airflow_db(env)
        runs = [("dltrain_ingest", DS, None), ("dltrain_retrain", DS, {"hparams": FAST})]
        outcomes = run_dags(runs, env)
        bad = [o for o in outcomes if not o.ok]
        assert len(outcomes) == 2 and not bad, bad[0].tail if bad else outcomes
        yield env, paths, HOROVOD
    finally:
        if old is None:
            os.environ.pop("DLTRAIN_HOME", None)
        else:
            os.environ["DLTRAIN_HOME"] = old


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_file_left_by_the_run_holds_a_secret(finished):
    env, paths, _ = finished
    logs = list((Path(paths.home()) / "logs").rglob("*.log"))
    assert logs, "the runner wrote no task logs"
    found = {}
    for root in {Path(paths.home()), Path(env["AIRFLOW_HOME"])}:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                hits = [s for s in SECRETS if s.encode() in data]
                if hits:
                    found[str(path)] = hits
    assert found == {}


def test_no_xcom_value_or_trigger_kwargs_holds_a_secret(finished):
    env, _, _ = finished
    db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        values = [str(row[0]) for row in conn.execute("SELECT value FROM xcom")]
    assert values, "no XCom was stored"
    assert [v for v in values if _leaks(v)] == []
    out = subprocess.run(
        [sys.executable, "-c", _TRIGGER_KWARGS], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert _leaks(out.strip().splitlines()[-1]) == []


def test_no_mlflow_param_or_tag_holds_a_secret(finished):
    _, paths, _ = finished
    from airflow_provider_dltrain.store.config import TrackingConfig

    client = TrackingConfig(tracking_uri=paths.mlflow_uri()).client()
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments])
    assert runs, "no MLflow run was recorded"
    texts = [json.dumps({"params": r.data.params, "tags": r.data.tags}) for r in runs]
    texts += [json.dumps(dict(mv.tags)) for mv in client.search_model_versions("")]
    texts += [json.dumps(dict(m.tags)) for m in client.search_registered_models()]
    texts += [json.dumps(dict(e.tags)) for e in experiments]
    assert [t for t in texts if _leaks(t)] == []


def test_retrain_dag_with_horovod_trains_two_ranks_registers_and_scores(finished):
    _, paths, with_horovod = finished
    if not with_horovod:
        pytest.skip("Horovod is built by `make horovod` (make test does it)")
    from airflow_provider_dltrain.store.config import TrackingConfig

    client = TrackingConfig(tracking_uri=paths.mlflow_uri()).client()
    experiment = client.get_experiment_by_name("dltrain_digits")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["dltrain.backend"] == "horovod" and run.data.tags["dltrain.world_size"] == "2"
    (version,) = client.search_model_versions("name='dltrain_digits'")
    assert version.run_id == run.info.run_id
    import pyarrow.dataset as pads

    from airflow_provider_dltrain import lake

    uri = paths.table("digit_predictions")
    scored = lake.open_table(uri).to_pyarrow_dataset().to_table(filter=pads.field("ds") == DS)
    assert scored.num_rows == PER_DAY  # every image of D scored once, by the Horovod-trained champion
