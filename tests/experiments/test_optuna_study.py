"""The Optuna study behind an adaptive search: trials by parameters, slots, retries, pruning."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.experiments import StoppingSpec

optuna = pytest.importorskip("optuna", reason="the optuna extra")
from airflow_provider_dltrain.experiments import optuna_study as st  # noqa: E402

SPEC = {
    "n_trials": 4,
    "metric": "val_loss",
    "seed": 3,
    "space": {"lr": {"loguniform": [1e-4, 1e-1]}, "bs": {"choice": [16, 32]}},
    "sampler": {"name": "tpe", "n_startup_trials": 2},
    "pruner": {"name": "median", "n_startup_trials": 1},
}


@pytest.fixture
def storage(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def _run(study, search, run_key, plan, storage, losses=None):
    """Each planned trial claimed, reported for 3 steps (pruned when the pruner says so), told."""
    numbers = []
    for p in plan:
        number, params, finished = st.claim_trial(study, search, run_key, slot=p.slot, params=p.params)
        numbers.append(number)
        if finished:
            continue
        rule = st.OptunaPruneRule(search.stopping(storage, study.study_name), number)
        stopped = None
        for step in range(3):
            value = (losses or {}).get(number, params["lr"]) * (3 - step)
            if rule.report(value, step)[0]:
                stopped = {"step": step}
                break
        st.finish_trial(study, number, {"metrics": {"val_loss": value}, "stopped": stopped}, "val_loss")
    return numbers


def test_slots_ask_once_and_a_rerun_lists_every_trial_by_its_parameters(storage):
    search = st.OptunaSearch.coerce(SPEC)
    study = st.open_study(search, storage, "s")
    plan = st.plan_trials(study, search, "run-1")
    assert [p.params for p in plan] == [None] * 4 and len({p.slot for p in plan}) == 4
    assert _run(study, search, "run-1", plan, storage) == [0, 1, 2, 3]
    again = st.plan_trials(st.open_study(search, storage, "s"), search, "run-2")
    assert [p.name for p in again] == [st.trial_name(t.params) for t in study.trials]
    assert (
        _run(study, search, "run-2", again, storage) == [0, 1, 2, 3] and len(study.trials) == 4
    )  # nothing asked
    fewer = st.plan_trials(study, st.OptunaSearch.coerce({**SPEC, "n_trials": 3}), "run-3")
    assert [p.params for p in fewer] == [t.params for t in study.trials[:3]]
    assert search.identity() == st.OptunaSearch.coerce({**SPEC, "n_trials": 9}).identity()


def test_a_retried_slot_resumes_its_trial_and_a_trial_left_running_is_failed_cleanly(storage):
    search = st.OptunaSearch.coerce(SPEC)
    study = st.open_study(search, storage, "s")
    first, second = st.plan_trials(study, search, "run-1")[:2]
    number, params, _ = st.claim_trial(study, search, "run-1", slot=first.slot, params=None)
    assert st.claim_trial(study, search, "run-1", slot=first.slot, params=None)[:2] == (number, params)
    st.fail_trial(study, number)  # the task failed: its retry asks again with the same parameters
    retried, retried_params, _ = st.claim_trial(study, search, "run-1", slot=first.slot, params=None)
    assert retried != number and retried_params == params
    orphan, _, _ = st.claim_trial(study, search, "run-1", slot=second.slot, params=None)
    st.plan_trials(study, search, "run-2")  # a later run finds both left RUNNING by a dead worker
    states = {t.number: t.state for t in study.trials}
    assert states[orphan] == states[retried] == optuna.trial.TrialState.FAIL


def test_known_parameters_get_a_running_trial_with_exactly_those_parameters(storage):
    search = st.OptunaSearch.coerce(SPEC)
    study = st.open_study(search, storage, "s")
    wanted = {"lr": 0.0123, "bs": 32}
    number, params, finished = st.claim_trial(study, search, "run-1", slot=None, params=wanted)
    assert params == wanted and not finished and study.trials[number].params == wanted
    assert st.claim_trial(study, search, "run-1", slot=None, params=wanted)[0] == number


def test_the_median_pruner_prunes_a_trial_that_lags_at_the_same_step(storage):
    search = st.OptunaSearch.coerce(SPEC)
    study = st.open_study(search, storage, "s")
    plan = st.plan_trials(study, search, "run-1")
    numbers = _run(study, search, "run-1", plan, storage, losses={0: 1.0, 1: 1.0, 2: 1.0, 3: 9.0})
    assert study.trials[numbers[3]].state == optuna.trial.TrialState.PRUNED
    assert max(study.trials[numbers[3]].intermediate_values) == 0  # stopped at its first step
    spec = StoppingSpec.coerce(search.stopping(storage, "s") | {"trial_number": numbers[0]})
    assert spec.to_dict()["pruner"]["name"] == "median"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sampler": "bayes"}, "search.optuna.sampler"),
        ({"pruner": {"name": "hyperband", "patience": 2}}, "patience"),
        ({"space": {"lr": {"normal": [0, 1]}}}, "search.optuna.space.lr"),
        ({"sampler": "grid"}, "grid"),
        ({"n_trials": 0}, "n_trials"),
        ({"budget": 3}, "unknown keys"),
        ({"storage": "postgresql://optuna:s3cret@db/optuna"}, "conn:<conn_id>"),  # no password in XCom
    ],
)
def test_bad_optuna_specs_name_the_field(change, message):
    with pytest.raises(InvalidSpecError, match=message):
        st.OptunaSearch.coerce({**SPEC, **change})


@pytest.mark.parametrize(
    "storage_url",
    [
        "postgresql://optuna@db/optuna?password=hunter2secret",
        "postgresql://db/optuna?sslmode=require&passwd=hunter2secret",
        "mysql+pymysql://db/optuna?PWD=hunter2secret",
        "postgresql://optuna:hunter2secret@db/optuna",
        "https://db/optuna?access_token=hunter2secret",
        "conn:postgresql://optuna:hunter2secret@db/optuna",
        "conn:postgresql://db/optuna?password=hunter2secret",
    ],
)
def test_a_storage_url_with_a_credential_is_refused_without_repeating_it(storage_url):
    with pytest.raises(InvalidSpecError, match="conn:<conn_id>") as err:
        st.OptunaSearch.coerce({**SPEC, "storage": storage_url})
    assert "hunter2secret" not in str(err.value)


def test_a_storage_url_shown_in_a_tag_or_log_keeps_neither_user_part_nor_query():
    assert st.redacted_storage("postgresql://optuna:pw@db:5432/optuna?sslmode=require") == (
        "postgresql://db:5432/optuna?***"
    )
    assert st.redacted_storage("conn:optuna_db") == "conn:optuna_db"
    # a connection id and a URL without credentials are accepted as before
    st.OptunaSearch.coerce({**SPEC, "storage": "conn:optuna_db"})
    st.OptunaSearch.coerce({**SPEC, "storage": "postgresql://optuna@db/optuna?sslmode=require"})


@pytest.mark.parametrize("sampler", ["random", "cmaes", {"name": "grid"}])
def test_every_sampler_builds(sampler, storage):
    space = {"bs": {"choice": [16, 32]}} if sampler == {"name": "grid"} else {"lr": {"uniform": [0, 1]}}
    search = st.OptunaSearch.coerce({**SPEC, "space": space, "sampler": sampler, "pruner": "hyperband"})
    assert st.open_study(search, storage, f"s-{uuid.uuid4().hex}").ask(search.distributions()).params
