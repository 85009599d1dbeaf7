"""A fair gate: score the challenger and its champion with one function on the same rows.

Each version's recorded metric was measured on its own validation split (a champion trained on
less data was judged on fewer rows), so comparing recorded values compares different exams.
:func:`rescore` loads both models from the registry and runs one ``evaluate(ctx, model)`` over one
:class:`TrainContext` per model, built from the same rows, hyper-parameters and seed.

No Airflow here; torch and mlflow are imported only when a gate re-scores.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import tempfile
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.store.models import (
    BASIS_RESCORED,
    TAG_DATA_FILTER,
    TAG_DELTA_REF,
    TAG_HPARAMS,
    GateSpec,
    ModelVersionInfo,
)

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.lake.scan_plan import ScanPlan

log = logging.getLogger(__name__)

EvaluateFn = Callable[[Any, Any], Mapping[str, float]]
# MLflow rejects model-version tag values longer than this; the rule tag must fit whole.
_MAX_TAG_VALUE = 5000


@dataclass(frozen=True)
class GateEvaluation:
    """How the gate re-scores both models: one evaluation function over one set of rows.

    :param evaluate_fn: ``evaluate(ctx, model) -> dict[str, float]`` or ``"package.module:function"``;
        ``ctx`` is a rank-0, single-process, CPU ``TrainContext`` over the evaluation rows and
        ``model`` the registered torch module in eval mode. The gate metric must be a key of its result.
    :param dataset: a fixed evaluation table version (``DeltaRef``, its dict or JSON). Default: the
        challenger's own training data (its ``dltrain.delta_ref`` and ``dltrain.data_filter`` tags).
    :param data_filter: DNF filter on ``dataset``, e.g. ``[["ds", "<=", "2026-11-28"]]``.
    :param hparams: ``ctx.hparams``; default the challenger's training hyper-parameters, so a
        function that splits like ``train`` (same key, same fraction) scores on its held-out rows.
    :param storage_options: delta-rs options for an ``s3://`` table; never recorded or logged.
    :param allow_pickle: load versions saved in pickle format (or shipping ``code_paths``) anyway,
        with a warning. Default False: such a version is refused before it is loaded, because
        unpickling runs code. Not part of :meth:`rule` (it changes no score).
    """

    evaluate_fn: EvaluateFn | str
    dataset: DeltaRef | None = None
    data_filter: Any = None
    hparams: Mapping[str, Any] | None = None
    storage_options: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    allow_pickle: bool = False

    def __post_init__(self) -> None:
        from airflow_provider_dltrain.lake.filters import normalize_filter
        from airflow_provider_dltrain.lake.ref import DeltaRef

        fn = self.evaluate_fn
        if not callable(fn) and not (isinstance(fn, str) and ":" in fn):
            raise InvalidSpecError(
                f"evaluate_fn must be a callable or 'package.module:function', got {fn!r:.200}"
            )
        if self.dataset is not None:
            object.__setattr__(self, "dataset", DeltaRef.coerce(self.dataset))
        elif self.data_filter:
            raise InvalidSpecError(
                "an evaluation data_filter needs an evaluation dataset: without one the challenger's "
                "own training filter is used; pass dataset={'uri': ..., 'version': N} too."
            )
        object.__setattr__(self, "data_filter", normalize_filter(self.data_filter))
        if not isinstance(self.allow_pickle, bool):
            raise InvalidSpecError(f"allow_pickle must be True or False, got {self.allow_pickle!r}.")
        if self.hparams is not None and not isinstance(self.hparams, Mapping):
            raise InvalidSpecError(f"evaluation hparams must be a dict, got {type(self.hparams).__name__}.")

    @property
    def fn_name(self) -> str:
        """``package.module:function`` of the evaluation function (recorded on the version)."""
        fn = self.evaluate_fn
        if isinstance(fn, str):
            return fn.strip()
        return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"

    def function(self) -> EvaluateFn:
        """The evaluation function itself (imported when given by name)."""
        return load_evaluate_fn(self.evaluate_fn)

    def rule(self, gate: GateSpec) -> str:
        """The gate rule recorded for replays: ``gate.rule`` plus what scored both models on which rows.

        Only inputs fixed by the caller go in (function, fixed table, filter, hparams): a replay of
        the same call must produce the same rule, whatever the challenger's tags say.
        """
        from airflow_provider_dltrain.utils.hashing import canonical_json, params_hash

        on = "challenger-training-data"
        if self.dataset is not None:
            on = f"{self.dataset.uri}@v{self.dataset.version} filter={canonical_json(self.data_filter)}"
        rule = f"{gate.rule} {BASIS_RESCORED} by {self.fn_name} on {on}"
        if self.hparams is not None:
            rule += f" hparams={params_hash(self.hparams)[:16]}"
        if len(rule) > _MAX_TAG_VALUE:  # a huge filter: keep the rule exact but short
            rule = f"{gate.rule} {BASIS_RESCORED} sha256={params_hash({'rule': rule})}"
        return rule


@dataclass(frozen=True)
class GateValues:
    """The two numbers a gate compares and how they were measured (recorded on the version)."""

    candidate_value: float
    champion_value: float | None
    basis: str
    eval_fn: str | None = None
    eval_data: str | None = None  # canonical JSON {"delta_ref": ..., "data_filter": ...}
    eval_rows: int | None = None
    note: str = ""  # appended to the gate's reason
    secondary: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    champion_cutoff: str | None = None  # recorded when a gate policy decided


def load_evaluate_fn(evaluate_fn: EvaluateFn | str) -> EvaluateFn:
    """The callable itself, or the function named by ``"package.module:function"``."""
    from airflow_provider_dltrain.etl.transform import load_callable

    return load_callable(evaluate_fn, field="evaluate_fn")


def rescore(
    tracking: TrackingConfig,
    evaluation: GateEvaluation,
    metric: str,
    candidate: ModelVersionInfo,
    champion: ModelVersionInfo | None,
    *,
    secondary: Sequence[str] = (),
) -> GateValues:
    """Score ``candidate`` and ``champion`` with ``evaluation`` on the same rows; return both values.

    :param secondary: further metrics the gate compares (``GateSpec.secondary``), taken from the
        same evaluation result.
    """
    from airflow_provider_dltrain.lake.scan_plan import resolve
    from airflow_provider_dltrain.utils.hashing import canonical_json

    fn = evaluation.function()
    if not evaluation.allow_pickle:  # refuse before minutes of scoring the other model
        _check_formats(tracking, candidate, champion)
    ref, data_filter = evaluation_data(evaluation, candidate)
    hparams = (
        dict(evaluation.hparams) if evaluation.hparams is not None else training_hparams(tracking, candidate)
    )
    plan = resolve(ref, data_filter, dict(evaluation.storage_options or {}))
    score = functools.partial(
        _score,
        tracking,
        fn,
        plan,
        hparams,
        metrics=(metric, *secondary),
        fn_name=evaluation.fn_name,
        allow_pickle=evaluation.allow_pickle,
    )
    cand_values, rows = score(candidate)
    champ_values: dict[str, float] = {}
    if champion is not None:
        champ_values, champ_rows = score(champion)
        if champ_rows != rows:  # e.g. a function that samples without ctx.seed: not the same rows
            log.warning(
                "%s read %s rows for the challenger but %s for the champion.",
                evaluation.fn_name,
                rows,
                champ_rows,
            )
    where = f"{rows} rows of " if rows is not None else ""
    where += f"{plan.ref.uri}@v{plan.ref.version}"
    note = f"; both models scored by {evaluation.fn_name} on the same {where}"
    if champion is None:
        note = f"; scored by {evaluation.fn_name} on {where}"
    return GateValues(
        candidate_value=cand_values[metric],
        champion_value=champ_values.get(metric),
        basis=BASIS_RESCORED,
        eval_fn=evaluation.fn_name,
        eval_data=canonical_json({"delta_ref": plan.ref.to_dict(), "data_filter": plan.data_filter}),
        eval_rows=rows,
        note=note,
        secondary={m: (cand_values[m], champ_values.get(m)) for m in secondary},
    )


def _check_formats(tracking: TrackingConfig, *versions: ModelVersionInfo | None) -> None:
    from airflow_provider_dltrain.store.loading import check_loadable, model_label

    for mv in versions:
        if mv is not None:
            label = model_label(mv.name, mv.version, mv.model_uri)
            check_loadable(tracking, mv.model_uri, label, allow_pickle=False)


def evaluation_data(evaluation: GateEvaluation, candidate: ModelVersionInfo) -> tuple[DeltaRef, Any]:
    """(table version, filter) to score on: the fixed evaluation table, else the candidate's training data."""
    from airflow_provider_dltrain.lake.ref import DeltaRef

    if evaluation.dataset is not None:
        return evaluation.dataset, evaluation.data_filter
    text = candidate.tags.get(TAG_DELTA_REF)
    if not text:
        raise InvalidSpecError(
            f"{candidate.name} v{candidate.version} has no {TAG_DELTA_REF!r} tag, so its training data is "
            "unknown: pass a fixed evaluation table (evaluation_dataset={'uri': ..., 'version': N})."
        )
    return DeltaRef.from_json(text), json.loads(candidate.tags.get(TAG_DATA_FILTER) or "[]")


def training_hparams(tracking: TrackingConfig, mv: ModelVersionInfo) -> dict[str, Any]:
    """The version's training hyper-parameters: its ``dltrain.hparams`` tag, else its run's params."""
    text = mv.tags.get(TAG_HPARAMS)
    if text:
        return dict(json.loads(text))
    if not mv.run_id:
        return {}
    params = tracking.client().get_run(mv.run_id).data.params
    # MLflow keeps params as flattened strings ("opt.lr" = "0.1"): recover numbers where possible.
    log.warning(
        "%s v%s has no %r tag; evaluating with its run's params, parsed back from MLflow's strings.",
        mv.name,
        mv.version,
        TAG_HPARAMS,
    )
    return {key: _literal(value) for key, value in params.items()}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _score(
    tracking: TrackingConfig,
    fn: EvaluateFn,
    plan: ScanPlan,
    hparams: Mapping[str, Any],
    mv: ModelVersionInfo,
    *,
    metrics: Sequence[str],
    fn_name: str,
    allow_pickle: bool,
) -> tuple[dict[str, float], int | None]:
    """``metrics`` of ``fn(ctx, model)`` for one version, and the rows its loaders read."""
    import torch

    from airflow_provider_dltrain.training.context import RankSeat, TrainContext
    from airflow_provider_dltrain.training.rank_job import seed_everything

    model = load_version(tracking, mv, allow_pickle=allow_pickle)
    seed = int(hparams.get("seed", 0))
    with tempfile.TemporaryDirectory(prefix="dltrain-gate-") as scratch:
        ctx = TrainContext(
            plan=plan,
            hparams=hparams,
            seed=seed,
            checkpoint_dir=scratch,
            rank=RankSeat(device=torch.device("cpu")),
        )
        seed_everything(seed)  # the same random state for both models: any sampling draws the same rows
        result = fn(ctx, model)
    rows = sum(ctx.rows_seen.values()) or None
    missing = [m for m in metrics if not isinstance(result, Mapping) or m not in result]
    if missing:
        keys = sorted(result) if isinstance(result, Mapping) else type(result).__name__
        raise InvalidSpecError(
            f"evaluate_fn {fn_name} returned {keys} for {mv.name} v{mv.version}, without the gate "
            f"metric {missing[0]!r}: return it from the function or gate on one it returns."
        )
    try:
        return {m: float(result[m]) for m in metrics}, rows
    except (TypeError, ValueError) as err:
        bad = {m: result[m] for m in metrics}
        raise InvalidSpecError(f"evaluate_fn {fn_name}: {bad!r:.300} are not all numbers.") from err


def load_version(tracking: TrackingConfig, mv: ModelVersionInfo, *, allow_pickle: bool = False) -> Any:
    """The torch module of a registered version, on CPU and in eval mode.

    :param allow_pickle: load a version saved in pickle format (or shipping code) anyway, with a
        warning; by default it is refused before anything is loaded (see ``store.loading``).
    :raises UnsafeModelError: the version needs pickle (or ships code) and ``allow_pickle`` is false.
    """
    from airflow_provider_dltrain.store.loading import load_torch_model, model_label

    label = model_label(mv.name, mv.version, mv.model_uri)
    with tracking.activated():
        model = load_torch_model(mv.model_uri, label, allow_pickle=allow_pickle)
    return _eval_mode(model)


def _eval_mode(model: Any) -> Any:
    """``model`` in eval mode, including pt2 exports, whose ``train()``/``eval()`` raise.

    The training tracker exports ``model.eval()``, so an exported graph already runs as in eval
    mode; making ``eval()`` a no-op lets evaluation code shared with training (which calls
    ``model.eval()``) run on it, while ``train()`` stays refused.
    """
    try:
        model.eval()
    except NotImplementedError:
        model.train = types.MethodType(_refuse_train, model)
        model.eval = types.MethodType(_already_eval, model)
    return model


def _refuse_train(self: Any, mode: bool = True) -> Any:
    if mode:
        raise NotImplementedError("an exported (pt2) model cannot be put back in training mode.")
    return self


def _already_eval(self: Any) -> Any:
    return self


def tracking_config(tracking: Any, client: Any) -> TrackingConfig:
    """The :class:`TrackingConfig` behind ``tracking``, or one naming the stores ``client`` talks to."""
    if isinstance(tracking, TrackingConfig):
        return tracking
    # An MlflowClient keeps its store URIs in private attributes only.
    tracking_uri = client._tracking_client.tracking_uri
    return TrackingConfig(tracking_uri=tracking_uri, registry_uri=getattr(client, "_registry_uri", None))
