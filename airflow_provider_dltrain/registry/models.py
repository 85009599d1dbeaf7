"""Value objects of the registry engine: model versions, gate specs, decisions and tag names."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError
from airflow_provider_dltrain.lake.partition import check_date

DEFAULT_ALIAS = "champion"

# Run tags written by the training engine; every ``dltrain.*`` run tag is copied onto the version.
RUN_TAG_PREFIX = "dltrain."
TAG_DATA_CUTOFF = "dltrain.data_cutoff"
TAG_DELTA_REF = "dltrain.delta_ref"  # the training data's DeltaRef JSON
TAG_DATA_FILTER = "dltrain.data_filter"  # the training data's normalised DNF filter as JSON
# Tags this engine owns on a model version.
TAG_REGISTRATION_KEY = "dltrain.registration_key"  # "<dag_id>/<run_id>" of the Airflow run
TAG_MODEL_URI = "dltrain.model_uri"  # the URI the training run reported (idempotency key with run_id)
TAG_METRIC_PREFIX = "dltrain.metric."
TAG_DECISION = "dltrain.gate.decision"  # "promoted" | "rejected"; written last, marks a finished gate
TAG_REASON = "dltrain.gate.reason"
TAG_GATE_ALIAS = "dltrain.gate.alias"
TAG_COMPARED_WITH = "dltrain.gate.compared_with"
TAG_GATE_CUTOFF = "dltrain.gate.data_cutoff"
TAG_GATE_RULE = "dltrain.gate.rule"  # "<metric> <mode> min_delta=<x>[ <basis>]": a replay must match it
TAG_CANDIDATE_VALUE = "dltrain.gate.candidate_value"
TAG_CHAMPION_VALUE = "dltrain.gate.champion_value"
TAG_GATE_BASIS = "dltrain.gate.basis"  # "rescored" (both scored on the same rows) | "recorded"
TAG_EVAL_DATA = "dltrain.gate.eval_data"  # {"delta_ref": ..., "data_filter": ...} of a rescored gate
TAG_EVAL_ROWS = "dltrain.gate.eval_rows"  # rows the evaluation read, when its loaders counted them
TAG_EVAL_FN = "dltrain.gate.eval_fn"  # "package.module:function" that scored both versions
TAG_HPARAMS = "dltrain.hparams"  # the training run's hyper-parameters as JSON (unflattened)
BASIS_RESCORED, BASIS_RECORDED = "rescored", "recorded"


def history_tags(alias: str) -> tuple[str, str]:
    """Version tags recording a promotion under ``alias``: (cut-off date, promotion time in ms).

    A version carrying ``<from tag> = D`` became the ``alias`` holder for data cut-off ``D``; the
    champion for date ``X`` is the promoted version with the greatest ``(from, promoted_at,
    version)`` among those with ``from <= X``.
    """
    if alias == DEFAULT_ALIAS:
        return "dltrain.champion_from", "dltrain.champion_promoted_at"
    return f"dltrain.{alias}_from", f"dltrain.{alias}_promoted_at"


class ModelNotFoundError(DltrainUserError, LookupError):
    """The registered model, version, alias or champion for a date does not exist."""


def normalize_date(value: Any, field_name: str) -> str:
    """``YYYY-MM-DD`` for a date, a datetime or an ISO string; :class:`InvalidSpecError` otherwise.

    The rule lives with the partition rules: :func:`airflow_provider_dltrain.lake.partition.check_date`.
    """
    return check_date(value, field_name)


@dataclass(frozen=True)
class ModelVersionInfo:
    """One registered model version as the engines and operators see it."""

    name: str
    version: int
    source: str
    run_id: str | None
    tags: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @property
    def model_uri(self) -> str:
        """``models:/<name>/<version>``: loadable with any MLflow flavor."""
        return f"models:/{self.name}/{self.version}"

    @classmethod
    def from_mlflow(cls, mv: Any) -> ModelVersionInfo:
        return cls(
            name=mv.name,
            version=int(mv.version),
            source=mv.source,
            run_id=mv.run_id or None,
            tags=dict(mv.tags or {}),
            aliases=tuple(getattr(mv, "aliases", None) or ()),
        )

    def champion_key(self, alias: str = DEFAULT_ALIAS) -> tuple[str, int, int] | None:
        """Ordering key of this version's promotion under ``alias``; None if never promoted."""
        from_tag, at_tag = history_tags(alias)
        cutoff = self.tags.get(from_tag)
        if not cutoff:
            return None
        try:
            promoted_at = int(self.tags.get(at_tag) or 0)
        except ValueError:
            promoted_at = 0
        return cutoff, promoted_at, self.version


@dataclass(frozen=True)
class ResolvedModel:
    """A model spec resolved to one immutable model: ``models:/name/version`` when registered."""

    name: str | None
    version: int | None
    model_uri: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "model_uri": self.model_uri}


@dataclass(frozen=True)
class GateSpec:
    """The promotion rule: ``metric`` must improve on the champion's by more than ``min_delta``.

    ``mode="min"``: lower is better (a loss); ``mode="max"``: higher is better (an accuracy).
    A candidate passes when its improvement is positive and at least ``min_delta``.
    """

    metric: str
    mode: Literal["min", "max"] = "min"
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric.strip():
            raise InvalidSpecError("metric must name the metric to compare, e.g. metric='val_loss'.")
        if self.mode not in ("min", "max"):
            raise InvalidSpecError(f"mode={self.mode!r}: use 'min' (lower is better) or 'max'.")
        try:
            delta = float(self.min_delta)
        except (TypeError, ValueError) as err:
            raise InvalidSpecError(f"min_delta={self.min_delta!r} is not a number.") from err
        if not math.isfinite(delta) or delta < 0:
            raise InvalidSpecError(f"min_delta={self.min_delta!r} must be a finite number >= 0.")
        object.__setattr__(self, "min_delta", delta)

    @property
    def rule(self) -> str:
        """One-line form recorded on gated versions, e.g. ``val_loss min min_delta=0.01``."""
        return f"{self.metric} {self.mode} min_delta={self.min_delta:g}"


@dataclass(frozen=True)
class GateDecision:
    """Whether a candidate beats the champion, and why, in one sentence."""

    passed: bool
    reason: str
    candidate_value: float | None = None
    champion_value: float | None = None
    champion_version: int | None = None


@dataclass(frozen=True)
class PromotionResult:
    """Outcome of gating one version for one data cut-off (the operator's ModelRef)."""

    name: str
    version: int
    data_cutoff: str
    promoted: bool
    reason: str
    alias: str
    holds_alias: bool
    compared_with: int | None
    champion_version: int | None
    candidate_value: float | None = None
    champion_value: float | None = None
    basis: str = BASIS_RECORDED
    eval_rows: int | None = None

    def to_model_ref(self) -> dict[str, Any]:
        """The ModelRef XCom dict; ``champion_version`` is the champion for this cut-off afterwards.

        ``candidate_value``/``champion_value`` are the two numbers the gate compared and ``basis``
        says how they were measured: ``rescored`` (both models on the same rows) or ``recorded``
        (each version's own training-time metric).
        """
        return {
            "name": self.name,
            "version": self.version,
            "alias": self.alias if self.holds_alias else None,
            "promoted": self.promoted,
            "reason": self.reason,
            "champion_version": self.champion_version,
            "compared_with": self.compared_with,
            "data_cutoff": self.data_cutoff,
            "model_uri": f"models:/{self.name}/{self.version}",
            "candidate_value": self.candidate_value,
            "champion_value": self.champion_value,
            "basis": self.basis,
            "eval_rows": self.eval_rows,
        }
