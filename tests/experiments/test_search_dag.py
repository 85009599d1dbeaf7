"""The example search and ablation DAGs through ``airflow dags test`` on the demo's embedded defaults.

The same DAG also runs an Optuna TPE study (``search={"optuna": ...}``) for the next date, twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DS = "2026-11-24"
DS_TPE = "2026-11-25"  # the study's own date: its runs leave the grid search's run of DS alone
pytestmark = pytest.mark.slow
TRIALS = 8  # 4 sampled at random, then 4 by TPE
STUDY = {
    "n_trials": TRIALS,
    "metric": "val_loss",
    "mode": "min",
    "seed": 7,
    "space": {"lr": {"loguniform": [1e-6, 3e-2]}},
    "sampler": {"name": "tpe", "constant_liar": True, "n_startup_trials": 4},
    "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
}
TPE = {
    "search": {"optuna": STUDY},
    "hparams": {"epochs": 3, "batch_size": 64, "seed": 7},
    "early_stopping": None,
}


def _write_digits(uri: str, rows: int = 300, ds: str = DS, start: int = 0) -> None:
    """Partition ``ds = DS`` of the digits table straight from sklearn's images (no Spark ingest)."""
    import pyarrow as pa
    from sklearn.datasets import load_digits

    from airflow_provider_dltrain import lake

    digits = load_digits()
    features = (digits.data[start : start + rows] / 16.0).astype("float32")
    table = pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 64).cast(
                pa.list_(pa.float32())
            ),
            "label": pa.array(digits.target[start : start + rows].astype("int64")),
            "source_file": pa.array([f"digits/{i:05d}.png" for i in range(start, start + rows)]),
        }
    )
    lake.overwrite_partition(uri, table, {"ds": ds})


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """Run the search, the ablation, the search again, then a TPE study twice, in one Airflow process."""
    import os

    home = tmp_path_factory.mktemp("search") / "home"
    saved = os.environ.get("DLTRAIN_HOME")
    os.environ["DLTRAIN_HOME"] = str(home)
    try:
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags

        _write_digits(paths.table("digits"))
        _write_digits(paths.table("digits"), rows=150, ds=DS_TPE, start=300)
        env = airflow_env()
        ensure_airflow_db(env)
        runs = [
            ("dltrain_search", DS, None),
            ("dltrain_ablation", DS, None),
            ("dltrain_search", DS, None),
            ("dltrain_search", DS_TPE, TPE),
            ("dltrain_search", DS_TPE, TPE),
        ]
        logs: list[str] = []  # read as each run ends: the re-run's log replaces the first run's file
        outcomes = run_dags(runs, env, on_result=lambda o: logs.append(Path(o.log_path).read_text()))
        assert [o.ok for o in outcomes] == [True] * 5, [o.tail for o in outcomes if not o.ok]
        yield {
            "env": env,
            "paths": paths,
            "logs": logs,
            "outcomes": outcomes,
            "tis_first": _task_instances(env, "dltrain_search"),
        }
    finally:
        if saved is None:
            os.environ.pop("DLTRAIN_HOME", None)
        else:
            os.environ["DLTRAIN_HOME"] = saved


def _task_instances(env, dag_id):
    """``[{task_id, map_index, state, start, end}]`` of the first run of ``dag_id`` (read in a subprocess:
    the test process never opens the demo's metadata DB)."""
    code = (
        "import json\n"
        "from sqlalchemy import select\n"
        "from airflow.models.dagrun import DagRun\n"
        "from airflow.models.taskinstance import TaskInstance as TI\n"
        "from airflow.utils.session import create_session\n"
        "with create_session() as s:\n"
        f"    run = s.scalars(select(DagRun).where(DagRun.dag_id == {dag_id!r}).order_by(DagRun.id)).first()\n"
        "    tis = s.scalars(select(TI).where(TI.dag_id == run.dag_id, TI.run_id == run.run_id)).all()\n"
        "    print(json.dumps([{'task_id': t.task_id, 'map_index': t.map_index, 'state': str(t.state),\n"
        "        'start': t.start_date.timestamp() if t.start_date else None,\n"
        "        'end': t.end_date.timestamp() if t.end_date else None,\n"
        "        'pool': t.pool} for t in tis]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _search_dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags")).dags["dltrain_search"]


def _most_at_once(intervals):
    events = sorted(
        [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1])
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def _child_runs(tracking, experiment, study=False):
    """The parent runs and their children: of the Optuna study (``study=True``), else of the others."""
    client = tracking.client()
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [
        r
        for r in runs
        if "dltrain.search_key" in r.data.tags and ("dltrain.optuna_study" in r.data.tags) == study
    ]
    ids = {p.info.run_id for p in parents}
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in ids]
    return parents, children


def _versions(tracking, cutoff):
    versions = tracking.client().search_model_versions("name='dltrain_digits_search'")
    return [v for v in versions if v.tags.get("dltrain.data_cutoff") == cutoff]


def test_search_runs_six_trials_two_at_most_stops_bad_ones_early_and_registers_the_best(searched):
    from airflow_provider_dltrain.demo.orchestrate import run_outcome
    from airflow_provider_dltrain.store.config import TrackingConfig

    tis = searched["tis_first"]
    trials = [t for t in tis if t["task_id"] == "train"]
    assert len(trials) == 6 and all(t["state"] == "success" for t in trials), trials
    assert _most_at_once([(t["start"], t["end"]) for t in trials]) <= 2
    assert _search_dag().get_task("train").max_active_tis_per_dagrun == 2
    tracking = TrackingConfig(tracking_uri=searched["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_search")
    assert len(parents) == 1 and len(children) == 6
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert {c.info.status for c in children} == {"FINISHED"}
    stopped = [c for c in children if c.data.tags.get("dltrain.stopped_early") == "true"]
    assert stopped, "the median rule stopped no trial"
    assert {c.data.tags["dltrain.stopped_step"] for c in stopped} <= {"1", "2"}  # grace step 0, 4 epochs
    outcome = run_outcome("dltrain_search", DS, searched["env"])
    best, registered = outcome["xcom"]["select_best"], outcome["xcom"]["register"]
    assert float(best["params"]["lr"]) >= 3e-3 and best["trial"].startswith("trial-") and not best["stopped"]
    versions = _versions(tracking, DS)
    assert [v.run_id for v in versions] == [best["run_id"]] and registered["promoted"] is True
    assert parents[0].data.tags["dltrain.best_run_id"] == best["run_id"]
    assert "STOPPED EARLY" in searched["logs"][0]


def test_rerun_of_an_unchanged_search_trains_nothing_and_registers_nothing_new(searched):
    from airflow_provider_dltrain.store.config import TrackingConfig

    tracking = TrackingConfig(tracking_uri=searched["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_search")
    assert len(parents) == 1 and len(children) == 6
    assert len(_versions(tracking, DS)) == 1
    assert searched["logs"][2].count("not training again") == 6


def test_ablation_over_four_components_reports_each_components_effect(searched):
    from airflow_provider_dltrain.demo.orchestrate import run_outcome
    from airflow_provider_dltrain.store.config import TrackingConfig

    tracking = TrackingConfig(tracking_uri=searched["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_ablation")
    assert len(parents) == 1 and len(children) == 5
    client = tracking.client()
    files = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"ablation.json", "ablation.md", "leaderboard.json"} <= files
    path = client.download_artifacts(parents[0].info.run_id, "ablation.json")
    report = json.loads(Path(path).read_text())
    assert sorted(r["component"] for r in report["components"]) == ["conv1", "conv2", "hidden", "pool"]
    for row in report["components"]:
        assert row["effect"] == pytest.approx(row["val_loss"] - report["baseline"])
    outcome = run_outcome("dltrain_ablation", DS, searched["env"])
    assert outcome["xcom"]["report"]["params"]["ablate"] in (None, "conv1", "conv2", "pool", "hidden")
    assert "Ablation report" in searched["logs"][1] and "| hidden |" in searched["logs"][1]


def _study(paths):
    import optuna

    storage = f"sqlite:///{Path(paths.mlflow_uri().split('sqlite:///', 1)[1]).parent / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def test_a_tpe_study_runs_eight_trials_two_at_a_time_prunes_laggards_and_registers_the_best(searched):
    pytest.importorskip("optuna", reason="the optuna extra: pip install 'airflow-provider-dltrain[optuna]'")
    from optuna.trial import TrialState

    from airflow_provider_dltrain.store.config import TrackingConfig

    study = _study(searched["paths"])
    assert len(study.trials) == TRIALS and {t.state for t in study.trials} <= {
        TrialState.COMPLETE,
        TrialState.PRUNED,
    }
    assert (
        _most_at_once([(t.datetime_start.timestamp(), t.datetime_complete.timestamp()) for t in study.trials])
        <= 2
    )
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned and all(max(t.intermediate_values) < 2 for t in pruned)  # stopped before epoch 3 of 3
    assert len({t.params["lr"] for t in study.trials}) == TRIALS  # asked one by one: no point drawn twice
    assert searched["logs"][3].count("Optuna trial") >= 2 * TRIALS  # each task asked, then told
    tracking = TrackingConfig(tracking_uri=searched["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_search", study=True)
    assert len(parents) == 1 and len(children) == TRIALS
    assert sum(c.data.tags.get("dltrain.stopped_early") == "true" for c in children) == len(pruned)
    xcom = searched["outcomes"][3].state["xcom"]
    assert xcom["select_best"]["metrics"]["val_loss"] == pytest.approx(study.best_value)
    assert xcom["register"]["version"] == int(_versions(tracking, DS_TPE)[0].version)


def test_an_unchanged_study_rerun_asks_nothing_and_trains_nothing(searched):
    pytest.importorskip("optuna")
    from airflow_provider_dltrain.store.config import TrackingConfig

    assert searched["logs"][4].count("not training again") == TRIALS
    assert len(_study(searched["paths"]).trials) == TRIALS
    tracking = TrackingConfig(tracking_uri=searched["paths"].mlflow_uri())
    assert len(_child_runs(tracking, "dltrain_digits_search", study=True)[1]) == TRIALS
    assert len(_versions(tracking, DS_TPE)) == 1
