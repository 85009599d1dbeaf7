"""Experiments (no Airflow): search specs into trials, asynchronous early stopping, ablation reports.

>>> from airflow_provider_dltrain.experiments import expand_trials
>>> expand_trials({"grid": {"lr": [0.003, 0.0003]}}, fixed={"epochs": 4})
[Trial(name='trial-00', index=0, hparams={'epochs': 4, 'lr': 0.003}), ...]

``{"optuna": {...}}`` is an adaptive search: its trials are asked from an Optuna study as they start
(:mod:`airflow_provider_dltrain.experiments.optuna_study`).

Every trial runs the unchanged ``train(ctx)`` through ``run_training``; a trial is an MLflow child
run of one parent run per search (tag ``mlflow.parentRunId``). Nothing here imports Airflow.
"""

from __future__ import annotations

from airflow_provider_dltrain.experiments.optuna_study import OptunaSearch, plan_trials
from airflow_provider_dltrain.experiments.results import (
    ablation_report,
    leaderboard,
    select_best,
)
from airflow_provider_dltrain.experiments.search_spec import ABLATE, Trial, expand_trials
from airflow_provider_dltrain.experiments.stopping import (
    AshaRule,
    MedianStoppingRule,
    StopDecision,
    StoppingSpec,
    TrialStopper,
)

__all__ = [
    "ABLATE",
    "AshaRule",
    "MedianStoppingRule",
    "OptunaSearch",
    "StopDecision",
    "StoppingSpec",
    "Trial",
    "TrialStopper",
    "ablation_report",
    "expand_trials",
    "leaderboard",
    "plan_trials",
    "select_best",
]
