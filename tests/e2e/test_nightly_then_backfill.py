"""Nightly runs D1..D5, then a backfill of D3, restated data for D2, a hyper-parameter change, lineage.

Every run goes through the ``airflow dags test`` code path with the interval [D, D+1) a backfill of D
gets, on the demo's embedded defaults (local Spark, Delta on disk, MLflow on SQLite).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import date, timedelta

import pytest

from airflow_provider_dltrain import lake

pytestmark = pytest.mark.slow

START = date(2026, 11, 24)
DATES = [(START + timedelta(days=i)).isoformat() for i in range(5)]
D2, D3, D5 = DATES[1], DATES[2], DATES[4]
MODEL = "dltrain_digits"
FAST = {"epochs": 6, "batch_size": 32, "lr": 0.003, "seed": 7}


def _files_by_partition(uri):
    table = lake.open_table(uri)
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out: dict[str, set[str]] = {}
    for a in adds:
        out.setdefault(a["partition.ds"], set()).add(a["path"])
    return out


def _rows(uri, ds):
    import pyarrow.dataset as pads

    table = lake.open_table(uri).to_pyarrow_dataset().to_table(filter=pads.field("ds") == ds)
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


class Demo:
    def __init__(self, home):
        os.environ["DLTRAIN_HOME"] = str(home)
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db
        from airflow_provider_dltrain.demo.seed import seed

        self.paths = paths
        seed(paths.landing(), START, len(DATES), per_day=200)
        self.env = airflow_env()
        ensure_airflow_db(self.env)
        from airflow_provider_dltrain.registry.config import TrackingConfig

        self.tracking = TrackingConfig(tracking_uri=paths.mlflow_uri())
        self.predictions = paths.table("digit_predictions")
        self.digits = paths.table("digits")

    def run(self, runs):
        from airflow_provider_dltrain.demo.run import run_dags

        outcomes = run_dags(runs, self.env)
        bad = [o for o in outcomes if not o.ok]
        assert len(outcomes) == len(runs) and not bad, bad[0].tail if bad else outcomes
        return outcomes

    def outcome(self, dag_id, ds):
        from airflow_provider_dltrain.demo.orchestrate import run_outcome

        return run_outcome(dag_id, ds, self.env)

    def versions(self):
        client = self.tracking.client()
        return sorted(int(v.version) for v in client.search_model_versions(f"name='{MODEL}'"))

    def live(self):
        return int(self.tracking.client().get_model_version_by_alias(MODEL, "champion").version)

    def champions(self):
        from airflow_provider_dltrain.registry import champion_as_of

        return {ds: champion_as_of(self.tracking, MODEL, ds).version for ds in DATES}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    old = os.environ.get("DLTRAIN_HOME")
    d = Demo(tmp_path_factory.mktemp("nightly") / "home")
    d.run(
        [
            (dag, ds, {"hparams": FAST} if dag == "dltrain_retrain" else None)
            for ds in DATES
            for dag in ("dltrain_ingest", "dltrain_retrain")
        ]
    )
    d.nightly = {
        "rows": {ds: _rows(d.predictions, ds) for ds in DATES},
        "files": _files_by_partition(d.predictions),
        "versions": d.versions(),
        "live": d.live(),
        "champions": d.champions(),
    }
    yield d
    if old is None:
        os.environ.pop("DLTRAIN_HOME", None)
    else:
        os.environ["DLTRAIN_HOME"] = old


def test_nightly_runs_score_every_date_once_with_the_champion_for_that_date(demo):
    for ds in DATES:
        rows = [json.loads(r) for r in demo.nightly["rows"][ds]]
        assert len(rows) == 200 and len({r["source_file"] for r in rows}) == 200
        assert {r["model_version"] for r in rows} == {demo.nightly["champions"][ds]}
    assert demo.nightly["live"] == demo.nightly["champions"][DATES[-1]]


def test_backfill_of_d3_reproduces_the_nightly_answer_and_trains_nothing(demo):
    (outcome,) = demo.run([("dltrain_retrain", D3, {"hparams": FAST})])
    state = demo.outcome("dltrain_retrain", D3)
    assert state["tasks"]["train"] == "skipped" and state["tasks"]["register"] == "skipped"
    with open(outcome.log_path) as log:
        assert "unchanged" in log.read()
    assert _rows(demo.predictions, D3) == demo.nightly["rows"][D3]
    files = _files_by_partition(demo.predictions)
    assert {ds: f for ds, f in files.items() if ds != D3} == {
        ds: f for ds, f in demo.nightly["files"].items() if ds != D3
    }
    assert demo.live() == demo.nightly["live"]
    assert demo.champions() == demo.nightly["champions"]
    assert demo.versions() == demo.nightly["versions"]


def test_restated_d2_changes_only_d2_and_never_the_live_champion(demo):
    labels = os.path.join(demo.paths.landing(), D2, "labels.csv")
    with open(labels, "a", newline="") as fh:
        csv.writer(fh).writerow(["no_label.png", 3])  # the missing label is supplied
    before_files = _files_by_partition(demo.predictions)
    demo.run([("dltrain_ingest", D2, None), ("dltrain_retrain", D2, {"hparams": FAST})])
    assert len(_rows(demo.digits, D2)) == 201
    assert len(_rows(demo.predictions, D2)) == 201
    after_files = _files_by_partition(demo.predictions)
    assert after_files[D2] != before_files[D2]
    assert {ds: f for ds, f in after_files.items() if ds != D2} == {
        ds: f for ds, f in before_files.items() if ds != D2
    }
    assert demo.live() == demo.nightly["live"]


def test_changing_a_hyper_parameter_retrains(demo):
    before = demo.versions()
    demo.run([("dltrain_retrain", D5, {"hparams": {**FAST, "lr": 0.002}})])
    state = demo.outcome("dltrain_retrain", D5)
    assert state["tasks"]["train"] == "success"
    assert len(demo.versions()) == len(before) + 1


def test_lineage_command_traces_predictions_back_to_the_ingest_commit(demo):
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", "lineage", demo.predictions, "--version", "2"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DLTRAIN_HOME": demo.paths.home()},
    ).stdout
    champion = demo.nightly["champions"][D3]
    assert f"model {MODEL} version {champion}" in out
    assert "MLflow run " in out and "val_accuracy=" in out
    assert f"trained on {demo.digits} version" in out and "data cut-off" in out
    assert "ingest commit version" in out and "dltrain_ingest /" in out and "ingest_images" in out
    assert f"'ds': '{D3}'" in out
