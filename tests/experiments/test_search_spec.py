"""Search specs into trials, best-trial selection and the ablation report."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.experiments import ablation_report, expand_trials, leaderboard, select_best
from airflow_provider_dltrain.experiments.results import ablation_markdown


def test_grid_is_the_cartesian_product_with_fixed_hparams_under_each_trial():
    trials = expand_trials({"grid": {"lr": [0.1, 0.01], "bs": [16, 32]}}, fixed={"epochs": 2, "bs": 8})
    assert [t.name for t in trials] == ["trial-00", "trial-01", "trial-02", "trial-03"]
    assert [t.hparams for t in trials][:2] == [
        {"epochs": 2, "bs": 16, "lr": 0.1},
        {"epochs": 2, "bs": 32, "lr": 0.1},
    ]


def test_random_search_with_a_seed_gives_the_same_trials_every_time():
    spec = {
        "random": {
            "n": 5,
            "seed": 3,
            "space": {
                "lr": {"loguniform": [1e-4, 1e-1]},
                "bs": {"choice": [16, 32]},
                "d": {"uniform": [0, 1]},
                "k": {"randint": [1, 3]},
            },
        }
    }
    first, again = expand_trials(spec), expand_trials(spec)
    assert first == again and len(first) == 5
    assert all(1e-4 <= t.hparams["lr"] <= 1e-1 and t.hparams["bs"] in (16, 32) for t in first)
    other = expand_trials({"random": {**spec["random"], "seed": 4}})
    assert [t.hparams for t in other] != [t.hparams for t in first]


def test_explicit_trials_and_ablation_names():
    assert [t.hparams for t in expand_trials({"trials": [{"lr": 1}, {"lr": 2}]})] == [{"lr": 1}, {"lr": 2}]
    ablation = expand_trials({"ablate": ["a", "b", "c"]}, fixed={"epochs": 1})
    assert [(t.name, t.hparams["ablate"]) for t in ablation] == [
        ("baseline", None),
        ("without-a", "a"),
        ("without-b", "b"),
        ("without-c", "c"),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"grid": {"lr": 0.1}}, "search.grid.lr"),
        ({"grid": {}, "trials": []}, "exactly one of"),
        ({"random": {"n": 2, "space": {"lr": {"normal": [0, 1]}}}}, "search.random.space.lr"),
        ({"random": {"n": 0, "space": {}}}, "search.random.n"),
        ({"trials": [{"lr": 1}, 3]}, r"search.trials\[1\]"),
        ({"ablate": ["a", "a"]}, "twice"),
        ({"random": {"n": 1, "space": {"lr": {"loguniform": [0, 1]}}}}, "low > 0"),
    ],
)
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(InvalidSpecError, match=message):
        expand_trials(spec)


def _result(trial, value, ablate="unset", stopped=None, model=True):
    params = {"lr": 0.1} if ablate == "unset" else {"ablate": ablate}
    return {
        "run_id": f"run-{trial}",
        "trial": trial,
        "metrics": {"val_loss": value},
        "params": params,
        "model_uri": f"models:/{trial}" if model else None,
        "stopped": stopped,
    }


def test_select_best_takes_the_lowest_and_the_earlier_trial_on_ties():
    results = [_result("a", 0.5), _result("b", 0.3), _result("c", 0.3), None]
    assert select_best(results, "val_loss")["trial"] == "b"
    assert select_best(results, "val_loss", "max")["trial"] == "a"
    board = leaderboard([_result("a", 0.5, stopped={"step": 1}), _result("b", 0.3)], "val_loss")
    assert [(r["trial"], r["stopped_at_step"]) for r in board] == [("b", None), ("a", 1)]
    with pytest.raises(InvalidSpecError, match="accuracy"):
        select_best(results, "accuracy")


def test_ablation_report_gives_each_components_effect_against_the_baseline():
    results = [
        _result("base", 0.4, None),
        _result("x", 0.9, "conv"),
        _result("y", 0.35, "pool"),
        _result("z", 0.5, "hidden"),
    ]
    report = ablation_report(results, "val_loss", "min")
    assert report["baseline"] == 0.4
    assert [(r["component"], round(r["effect"], 6)) for r in report["components"]] == [
        ("conv", 0.5),
        ("hidden", 0.1),
        ("pool", -0.05),
    ]
    text = ablation_markdown(report)
    assert "| conv | 0.9 | +0.5 | helps |" in text and "| pool | 0.35 | -0.05 | hurts |" in text
    with pytest.raises(InvalidSpecError, match="baseline"):
        ablation_report(results[1:], "val_loss")
