"""An Optuna TPE study through the example search DAG: 12 trials, 2 at a time, pruned ones early.

Three runs of ``dltrain_search`` for one date with ``{"search": {"optuna": ...}}``: the study, the
unchanged study again, then the study with one trial fewer. Machinery: the search DAG test's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_search_dag import DS, _child_runs, _most_at_once, _task_instances, _write_digits

pytestmark = pytest.mark.slow
pytest.importorskip("optuna", reason="the optuna extra: pip install 'airflow-provider-dltrain[optuna]'")

STUDY = {
    "n_trials": 12,
    "metric": "val_loss",
    "mode": "min",
    "seed": 7,
    "space": {"lr": {"loguniform": [1e-6, 3e-2]}},
    "sampler": {"name": "tpe", "constant_liar": True, "n_startup_trials": 4},
    "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
}
CONF = {
    "search": {"optuna": STUDY},
    "hparams": {"epochs": 3, "batch_size": 64, "seed": 7},
    "early_stopping": None,
}
FEWER = {**CONF, "search": {"optuna": {**STUDY, "n_trials": 11}}}


@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    home = tmp_path_factory.mktemp("optuna") / "home"
    saved = os.environ.get("DLTRAIN_HOME")
    os.environ["DLTRAIN_HOME"] = str(home)
    try:
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db, run_dags

        _write_digits(paths.table("digits"), rows=200)
        env = airflow_env()
        ensure_airflow_db(env)
        runs = [("dltrain_search", DS, CONF), ("dltrain_search", DS, CONF), ("dltrain_search", DS, FEWER)]
        logs: list[str] = []
        outcomes = run_dags(runs, env, on_result=lambda o: logs.append(Path(o.log_path).read_text()))
        assert [o.ok for o in outcomes] == [True, True, True], [o.tail for o in outcomes if not o.ok]
        yield {
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


def _study(paths):
    import optuna

    storage = f"sqlite:///{Path(paths.mlflow_uri().split('sqlite:///', 1)[1]).parent / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def test_a_tpe_study_runs_twelve_trials_two_at_a_time_prunes_laggards_and_registers_the_best(studied):
    from optuna.trial import TrialState

    from airflow_provider_dltrain.registry.config import TrackingConfig

    trials = [t for t in studied["tis_first"] if t["task_id"] == "train"]
    assert len(trials) == 12 and all(t["state"] == "success" for t in trials), trials
    assert _most_at_once([(t["start"], t["end"]) for t in trials]) <= 2
    study = _study(studied["paths"])
    states = [t.state for t in study.trials]
    assert len(states) == 12 and set(states) <= {TrialState.COMPLETE, TrialState.PRUNED}, states
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "the median pruner pruned no trial"
    assert all(max(t.intermediate_values) < 2 for t in pruned)  # stopped before the last of 3 epochs
    assert len({t.params["lr"] for t in study.trials}) == 12  # asked one by one: no repeated point
    tracking = TrackingConfig(tracking_uri=studied["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_search")
    assert len(parents) == 1 and len(children) == 12
    stopped = [c for c in children if c.data.tags.get("dltrain.stopped_early") == "true"]
    assert len(stopped) == len(pruned)
    xcom = studied["outcomes"][0].state["xcom"]
    best, registered = xcom["select_best"], xcom["register"]
    assert best["metrics"]["val_loss"] == pytest.approx(study.best_value)
    assert registered["promoted"] is True and registered["version"] == 1


def test_an_unchanged_study_rerun_trains_nothing_and_one_trial_fewer_keeps_every_other_result(studied):
    from airflow_provider_dltrain.registry.config import TrackingConfig

    assert studied["logs"][1].count("not training again") == 12
    assert studied["logs"][2].count("not training again") == 11
    tracking = TrackingConfig(tracking_uri=studied["paths"].mlflow_uri())
    parents, children = _child_runs(tracking, "dltrain_digits_search")
    assert len(parents) == 1 and len(children) == 12  # no trial trained twice
    assert len(_study(studied["paths"]).trials) == 12  # nothing asked again
    versions = tracking.client().search_model_versions("name='dltrain_digits_search'")
    assert len(versions) == 1
