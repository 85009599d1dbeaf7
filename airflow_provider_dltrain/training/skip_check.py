"""Skip training when the champion for the cut-off was trained on the same rows, code and parameters.

``TrainModelOperator(skip_if_unchanged=NAME)`` and the backfill plan decide with :func:`check_training`:
the identity a run with these inputs would get (:func:`~.tracked_run.run_identity`: the content
fingerprint of the rows ``data_filter`` selects at the pinned version, the code hash, the
hyper-parameters' hash) is compared with the tags of the version of ``NAME`` that is champion for the
data cut-off. Equal: skip. Otherwise, a version registered for this cut-off with the same identity
whose gate already decided (promoted or rejected) also skips: training again would build the same
model. No model is loaded and nothing is trained to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions

#: How the identity tags read in a reason (``dltrain.code_hash`` → ``code``).
WORDS = {
    "dltrain.data_fingerprint": "data",
    "dltrain.code_hash": "code",
    "dltrain.params_hash": "hyper-parameters",
}


@dataclass(frozen=True)
class TrainingCheck:
    """The decision: ``skip_reason`` (skip, and why) or None (train); what differs and from what."""

    cutoff: str | None
    skip_reason: str | None = None
    champion: int | None = None  # the version that is champion for the cut-off, None before the first
    changed: list[str] = field(default_factory=list)  # identity tags that differ from the champion's
    before: dict[str, str] = field(default_factory=dict)  # the champion's values of those tags
    after: dict[str, str] = field(default_factory=dict)  # this run's values of those tags
    note: str = ""  # why it trains, in words

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None


def check_training(
    tracking: Any,
    model_name: str,
    train_fn: Any,
    dataset: DeltaRef,
    hparams: Mapping[str, Any],
    *,
    data_filter: Any = None,
    data_cutoff: str | None = None,
    storage_options: StorageOptions | None = None,
    code_version: str | None = None,
) -> TrainingCheck:
    """Whether a run with these inputs would train the champion for its cut-off again (see the module)."""
    from airflow_provider_dltrain.store.champion_history import champion_as_of
    from airflow_provider_dltrain.training.runner import IDENTITY_TAGS, run_identity

    identity = run_identity(
        train_fn, dataset, dict(hparams), data_filter, storage_options, code_version=code_version or None
    )
    cutoff = data_cutoff or identity.get("dltrain.data_cutoff")
    if not cutoff:
        return TrainingCheck(None, note="no data cut-off (data_cutoff or a '<=' partition filter)")
    champion = champion_as_of(tracking, model_name, cutoff)
    if champion is None:
        check = TrainingCheck(cutoff, note=f"{model_name} has no champion for cut-off {cutoff} yet")
    else:
        changed = [tag for tag in IDENTITY_TAGS if champion.tags.get(tag) != identity[tag]]
        if not changed:
            reason = (
                f"data, training code and hyper-parameters are unchanged since {model_name} "
                f"v{champion.version}, the champion for data cut-off {cutoff}"
            )
            return TrainingCheck(cutoff, reason, champion=int(champion.version))
        check = TrainingCheck(
            cutoff,
            champion=int(champion.version),
            changed=changed,
            before={tag: str(champion.tags.get(tag)) for tag in changed},
            after={tag: identity[tag] for tag in changed},
            note=f"changed since {model_name} v{champion.version} (champion for {cutoff}): "
            + ", ".join(WORDS.get(tag, tag) for tag in changed),
        )
    judged = _already_judged(tracking, model_name, cutoff, identity, IDENTITY_TAGS, champion)
    return check if judged is None else TrainingCheck(cutoff, judged, champion=check.champion)


def _already_judged(
    tracking: Any, name: str, cutoff: str, identity: Mapping[str, str], keys: Any, champion: Any
) -> str | None:
    """A version with identical inputs for this cut-off whose gate already decided: retraining
    would rebuild the same model and register a duplicate, so skip and say which one it was."""
    from airflow_provider_dltrain.store.client import mlflow_client, versions_tagged

    # the versions registered for cut-offs in this cut-off's month: one search, whatever the
    # registry's history, and the same search for every date of that month (a plan asks it once)
    for mv in versions_tagged(mlflow_client(tracking), name, "dltrain.data_cutoff", cutoff[:7]):
        tags = mv.tags
        if tags.get("dltrain.data_cutoff") != cutoff or not tags.get("dltrain.gate.decision"):
            continue
        if all(tags.get(key) == identity[key] for key in keys):
            current = f"v{champion.version}" if champion is not None else "none"
            return (
                f"data, training code and hyper-parameters are unchanged since {name} v{mv.version}, "
                f"registered for cut-off {cutoff} and {tags['dltrain.gate.decision']} by the gate "
                f"({tags.get('dltrain.gate.reason', '')}); the champion for {cutoff} is {current}"
            )
    return None
