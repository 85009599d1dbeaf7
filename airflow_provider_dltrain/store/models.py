"""Value objects of the registry engine: model versions, gate specs, decisions and tag names."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
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
TAG_GATE_RULE = (
    "dltrain.gate.rule"  # "<metric> <mode> min_delta=<x>[ policy=<json>][ <basis>]": replays match it
)
TAG_CANDIDATE_VALUE = "dltrain.gate.candidate_value"
TAG_CHAMPION_VALUE = "dltrain.gate.champion_value"
TAG_GATE_BASIS = "dltrain.gate.basis"  # "rescored" (both scored on the same rows) | "recorded"
TAG_EVAL_DATA = "dltrain.gate.eval_data"  # {"delta_ref": ..., "data_filter": ...} of a rescored gate
TAG_EVAL_ROWS = "dltrain.gate.eval_rows"  # rows the evaluation read, when its loaders counted them
TAG_EVAL_FN = "dltrain.gate.eval_fn"  # "package.module:function" that scored both versions
TAG_SECONDARY_VALUES = "dltrain.gate.secondary_values"  # {metric: [candidate, champion]} of a policy gate
TAG_CHAMPION_CUTOFF = "dltrain.gate.champion_cutoff"  # the champion's data cut-off, for ties="later_cutoff"
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


TIE_POLICIES = ("reject", "later_cutoff")
SECONDARY_ROLES = ("tiebreak", "no_regress")


@dataclass(frozen=True)
class SecondaryMetric:
    """A second metric the gate looks at: ``tiebreak`` decides a tie on the gate metric (better
    promotes, worse refuses, equal goes on to the next one); ``no_regress`` refuses a candidate whose
    value is worse than the champion's by more than ``max_regression``."""

    metric: str
    mode: Literal["min", "max"] = "min"
    role: Literal["tiebreak", "no_regress"] = "no_regress"
    max_regression: float = 0.0

    @classmethod
    def coerce(cls, value: Any) -> SecondaryMetric:
        if isinstance(value, SecondaryMetric):
            return value
        if not isinstance(value, Mapping) or set(value) - set(cls.__dataclass_fields__):
            raise InvalidSpecError(
                f"secondary metric {value!r:.200} must be a dict with keys from "
                f"{sorted(cls.__dataclass_fields__)}, e.g. {{'metric': 'val_loss', 'role': 'tiebreak'}}."
            )
        return cls(**dict(value))

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric.strip():
            raise InvalidSpecError("a secondary metric needs 'metric', e.g. {'metric': 'val_loss'}.")
        if self.mode not in ("min", "max"):
            raise InvalidSpecError(f"secondary {self.metric!r}: mode={self.mode!r}, use 'min' or 'max'.")
        if self.role not in SECONDARY_ROLES:
            raise InvalidSpecError(
                f"secondary {self.metric!r}: role={self.role!r}, use one of {SECONDARY_ROLES}."
            )
        object.__setattr__(self, "max_regression", _number(self.max_regression, "max_regression", low=0.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "role": self.role,
            "max_regression": self.max_regression,
        }


def _number(value: Any, name: str, *, low: float | None = None, high: float | None = None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise InvalidSpecError(f"{name}={value!r} is not a number.") from err
    if (
        not math.isfinite(number)
        or (low is not None and number < low)
        or (high is not None and number > high)
    ):
        bounds = (
            f" in [{low:g}, {high:g}]"
            if low is not None and high is not None
            else (f" >= {low:g}" if low is not None else "")
        )
        raise InvalidSpecError(f"{name}={value!r} must be a finite number{bounds}.")
    return number


def _optional_number(value: Any, name: str, **bounds: float) -> float | None:
    return None if value is None or value == "" else _number(value, name, **bounds)


@dataclass(frozen=True)
class GateSpec:
    """The promotion rule: ``metric`` must improve on the champion's by more than ``min_delta``.

    ``mode="min"``: lower is better (a loss); ``mode="max"``: higher is better (an accuracy).
    A candidate passes when its improvement is positive and at least ``min_delta``.

    Policies (all off by default; the default gate decides exactly as it always has):

    :param min_value: the candidate's value must be ``>= min_value`` (an absolute floor), champion or not.
    :param max_value: the candidate's value must be ``<= max_value`` (an absolute ceiling).
    :param min_absolute_change: MLflow ``MetricThreshold`` semantics: the candidate must be better by
        at least this much (``>= champion + x`` for higher-is-better).
    :param min_relative_change: in ``[0, 1]``: MLflow ``MetricThreshold`` semantics (MLflow >= 3.17):
        ``(candidate - champion) / |champion| >= x`` (the reverse difference when lower is better);
        a zero champion only needs a better candidate. See :func:`~.gate.metric_threshold_failure`.
    :param greater_is_better: MLflow's name for the direction; when given it sets ``mode``.
    :param ties: ``"reject"`` (default: a tie never promotes) or ``"later_cutoff"``: a tie promotes
        when the candidate's data cut-off is later than the champion's (more data, same score).
    :param secondary: :class:`SecondaryMetric` (or dicts): ``tiebreak`` metrics decide a tie first,
        in order; ``no_regress`` metrics refuse any promotion that makes them worse.
    """

    metric: str
    mode: Literal["min", "max"] = "min"
    min_delta: float = 0.0
    _: KW_ONLY
    min_value: float | None = None
    max_value: float | None = None
    min_absolute_change: float | None = None
    min_relative_change: float | None = None
    greater_is_better: bool | None = None
    ties: Literal["reject", "later_cutoff"] = "reject"
    secondary: tuple[SecondaryMetric, ...] = ()

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
        self._check_policy()

    def _check_policy(self) -> None:
        setattr_ = object.__setattr__
        if self.greater_is_better is not None:
            if not isinstance(self.greater_is_better, bool):
                raise InvalidSpecError(f"greater_is_better={self.greater_is_better!r}: use True or False.")
            if self.mode == "max" and not self.greater_is_better:
                raise InvalidSpecError("mode='max' and greater_is_better=False disagree: give one of them.")
            setattr_(self, "mode", "max" if self.greater_is_better else "min")
            setattr_(self, "greater_is_better", None)  # the mode says it; one spelling per rule
        setattr_(self, "min_value", _optional_number(self.min_value, "min_value"))
        setattr_(self, "max_value", _optional_number(self.max_value, "max_value"))
        change = _optional_number(self.min_absolute_change, "min_absolute_change", low=0.0)
        setattr_(self, "min_absolute_change", change)
        relative = _optional_number(self.min_relative_change, "min_relative_change", low=0.0, high=1.0)
        setattr_(self, "min_relative_change", relative)
        if self.ties not in TIE_POLICIES:
            raise InvalidSpecError(f"ties={self.ties!r}: use one of {TIE_POLICIES}.")
        if isinstance(self.secondary, (str, bytes, dict)) or not isinstance(self.secondary, (list, tuple)):
            raise InvalidSpecError(f"secondary must be a list of metric dicts, got {self.secondary!r:.200}.")
        setattr_(self, "secondary", tuple(SecondaryMetric.coerce(s) for s in self.secondary))

    @classmethod
    def with_policy(cls, metric: str, mode: Any, min_delta: Any, policy: Any) -> GateSpec:
        """A gate from the three basic fields and a policy dict (the operator's ``gate_policy``)."""
        if not policy:
            return cls(metric, mode, min_delta)
        unknown = sorted(set(policy) - set(POLICY_FIELDS)) if isinstance(policy, Mapping) else None
        if unknown is None or unknown:
            raise InvalidSpecError(
                f"gate_policy must be a dict with keys from {list(POLICY_FIELDS)}; got {policy!r:.300}."
            )
        return cls(metric, mode, min_delta, **dict(policy))

    def policy(self) -> dict[str, Any]:
        """The policy fields that differ from the default, JSON-ready ({} for a default gate)."""
        out: dict[str, Any] = {}
        for name in POLICY_FIELDS:
            value = getattr(self, name)
            if name == "secondary":
                value = [s.to_dict() for s in value]
            if value not in (None, (), [], "reject"):
                out[name] = value
        return out

    @property
    def rule(self) -> str:
        """One-line form recorded on gated versions, e.g. ``val_loss min min_delta=0.01``.

        A gate with policies appends `` policy=<compact JSON>`` (no spaces, so the rule stays one
        token per field and :func:`parse_rule` reads it back exactly).
        """
        rule = f"{self.metric} {self.mode} min_delta={self.min_delta:g}"
        policy = self.policy()
        if policy:
            text = json.dumps(policy, sort_keys=True, separators=(",", ":"))
            rule += " policy=" + text.replace(" ", "\\u0020")
        return rule


POLICY_FIELDS = (
    "min_value",
    "max_value",
    "min_absolute_change",
    "min_relative_change",
    "greater_is_better",
    "ties",
    "secondary",
)


@dataclass(frozen=True)
class GateDecision:
    """Whether a candidate beats the champion, and why, in one sentence."""

    passed: bool
    reason: str
    candidate_value: float | None = None
    champion_value: float | None = None
    champion_version: int | None = None
    decided_by: str = ""  # the rule that decided: "improvement", "min_delta", "min_value", "ties", ...


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
