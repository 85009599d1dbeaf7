"""The search's MLflow bookkeeping: one parent run per search, trials as its child runs.

The parent is found by its ``dltrain.search_key`` tag (a digest of what defines the search: the DAG,
its data interval, the pinned dataset and the spec), so expanding the same search again - a re-run,
a retry - reuses it. A finished trial's TrainResult is stored on its run (``dltrain.trial_result``):
a trial whose inputs are unchanged under the same parent is answered from it, not trained again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.experiments.stopping import PARENT_TAG, TRIAL_TAG
from airflow_provider_dltrain.store.config import TrackingConfig

log = logging.getLogger("airflow_provider_dltrain.experiments")

SEARCH_KEY_TAG = "dltrain.search_key"
RESULT_TAG = "dltrain.trial_result"
STOPPED_TAG = "dltrain.stopped_early"
MAX_RESULT_CHARS = 5000  # within every MLflow store's tag value limit


def search_key(definition: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of what defines a search (same definition, same parent run)."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def ensure_parent_run(
    config: TrackingConfig, experiment_name: str, key: str, *, run_name: str, tags: Mapping[str, str]
) -> tuple[str, bool]:
    """``(run_id, created)`` of the search's parent run, created only when none has this key."""
    from airflow_provider_dltrain.store.config import ensure_experiment

    client = config.client()
    experiment_id = ensure_experiment(client, experiment_name, config.tracking_uri)
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{SEARCH_KEY_TAG}` = '{key}'",
        order_by=["attributes.start_time ASC"],
    )
    if found:
        return str(found[0].info.run_id), False
    run = client.create_run(experiment_id, tags={**dict(tags), SEARCH_KEY_TAG: key}, run_name=run_name)
    return str(run.info.run_id), True


def reusable_trial(
    config: TrackingConfig, parent_run_id: str, trial: str, identity: Mapping[str, str]
) -> dict[str, Any] | None:
    """The stored TrainResult of a FINISHED child run of the parent with equal identity tags.

    A trial is identified by its data, code and hyper-parameters (the identity tags), not by its
    name or position: when a re-expanded list shifts trials, each still finds its own result (a run
    of the same name is preferred). The result is returned under ``trial``'s name.
    """
    client = config.client()
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}' AND attributes.status = 'FINISHED'",
        order_by=["attributes.start_time ASC"],
        max_results=10000,
    )
    matching = [
        run
        for run in runs
        if RESULT_TAG in run.data.tags and all(run.data.tags.get(k) == v for k, v in identity.items())
    ]
    matching.sort(key=lambda run: run.data.tags.get(TRIAL_TAG) != trial)  # stable: earliest first
    if not matching:
        return None
    return {**json.loads(matching[0].data.tags[RESULT_TAG]), "trial": trial}


def record_trial_result(config: TrackingConfig, result: Mapping[str, Any]) -> bool:
    """Store a trial's TrainResult on its run so an unchanged re-run can reuse it; False when too long
    for a tag (then the trial simply trains again on a re-run)."""
    keep = {k: v for k, v in result.items() if k != "run_dir"}
    text = json.dumps(keep, sort_keys=True, default=str)
    if len(text) > MAX_RESULT_CHARS:
        log.warning(
            "trial run %s: its result is %d characters, over the %d a tag holds; a re-run will train it again",
            result["run_id"],
            len(text),
            MAX_RESULT_CHARS,
        )
        return False
    config.client().set_tag(str(result["run_id"]), RESULT_TAG, text)
    return True


def finish_parent(
    config: TrackingConfig,
    parent_run_id: str,
    *,
    best: Mapping[str, Any],
    metric: str,
    board: Sequence[Mapping[str, Any]],
    artifacts: Mapping[str, str],
) -> None:
    """Record the outcome on the parent run (best trial, its metric, artifacts) and end it FINISHED."""
    from mlflow.entities import Metric, RunTag

    client = config.client()
    value = float((best.get("metrics") or {}).get(metric, float("nan")))
    tags = [
        RunTag("dltrain.best_run_id", str(best["run_id"])),
        RunTag("dltrain.best_trial", str(best.get("trial") or "")),
        RunTag("dltrain.trials", str(len(board))),
        RunTag("dltrain.stopped_trials", str(sum(1 for r in board if r.get("stopped_at_step") is not None))),
    ]
    client.log_batch(parent_run_id, metrics=[Metric(f"best_{metric}", value, 0, 0)], tags=tags)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in {
            "leaderboard.json": json.dumps(list(board), indent=2, default=str),
            **artifacts,
        }.items():
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            client.log_artifact(parent_run_id, path)
    client.set_terminated(parent_run_id, status="FINISHED")
