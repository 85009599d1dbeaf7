"""The retrain DAG with ``DLTRAIN_TRAIN_BACKEND=horovod``, through the ``airflow dags test`` code path."""

from __future__ import annotations

import json
from datetime import date

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("horovod.torch", reason="Horovod is built by `make horovod` (make test does it)")

DS = "2026-11-24"
FAST = {"epochs": 2, "batch_size": 32, "lr": 0.003, "seed": 7}


def test_retrain_dag_with_horovod_trains_two_ranks_registers_and_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRAIN_HOME", str(tmp_path / "home"))
    from airflow_provider_dltrain.demo import paths
    from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags
    from airflow_provider_dltrain.demo.seed import seed

    seed(paths.landing(), date.fromisoformat(DS), 1, per_day=120)
    env = airflow_env()
    env["DLTRAIN_TRAIN_BACKEND"] = "horovod"
    env["DLTRAIN_TRAIN_BACKEND_OPTIONS"] = json.dumps({"num_processes": 2})
    ensure_airflow_db(env)
    outcomes = run_dags([("dltrain_ingest", DS, None), ("dltrain_retrain", DS, {"hparams": FAST})], env)
    bad = [o for o in outcomes if not o.ok]
    assert len(outcomes) == 2 and not bad, bad[0].tail if bad else outcomes

    from airflow_provider_dltrain.registry.config import TrackingConfig

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
    assert scored.num_rows == 120  # every image of D scored once, by the Horovod-trained champion
