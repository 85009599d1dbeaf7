"""Adaptive search through an Optuna study: ask when a trial starts, tell when it ends, prune between.

A search spec ``{"optuna": {...}}`` keeps its trials in an Optuna study in an RDB storage (a SQLite
file, or any SQLAlchemy URL every worker can reach), so each mapped training task asks the study for
its parameters *when it starts*: TPE sees every trial finished so far, and ``constant_liar`` keeps
two trials running at once from being handed the same region. Pruners (median, successive halving,
Hyperband) judge each logged step from the intermediate values the study holds.

Identity. A trial is identified by its parameters, never by its position: an expansion lists the
study's finished trials by parameters (each found again, with its MLflow result, by those
parameters), and only the trials still to be asked are anonymous slots. A slot remembers the trial
it asked (``dltrain.slot``), so a retry of a task whose worker died resumes that trial with the same
parameters; a trial left RUNNING by an earlier DAG run is failed when the search is expanded again.

No Airflow here; Optuna is imported only when a study is opened (extra ``optuna``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from airflow_provider_dltrain.exceptions import InvalidSpecError

log = logging.getLogger("airflow_provider_dltrain.experiments")

SAMPLERS = ("tpe", "random", "grid", "cmaes")
PRUNERS = ("median", "successive_halving", "hyperband", "none")
SLOT_ATTR = "dltrain.slot"  # the expansion slot that asked this trial ("<run key>#<n>")
RUN_ATTR = "dltrain.run"  # the Airflow DAG run that asked it
CLAIM_ATTR = "dltrain.claim"  # a one-off token to find a trial added with given parameters
CONN_PREFIX = "conn:"  # storage="conn:<conn_id>": an Airflow connection, resolved by the operators
_SAMPLER_OPTIONS = {
    "tpe": {"seed", "constant_liar", "n_startup_trials", "multivariate", "n_ei_candidates"},
    "random": {"seed"},
    "grid": {"seed"},
    "cmaes": {"seed", "n_startup_trials", "sigma0"},
}
_PRUNER_OPTIONS = {
    "median": {"n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"},
    "successive_halving": {"min_resource", "reduction_factor", "min_early_stopping_rate"},
    "hyperband": {"min_resource", "max_resource", "reduction_factor"},
    "none": set(),
}


def _named(value: Any, kinds: tuple[str, ...], options: Mapping[str, set[str]], what: str) -> dict[str, Any]:
    """``"tpe"`` or ``{"name": "tpe", ...}`` as a checked dict with a ``name``."""
    spec = {"name": value} if isinstance(value, str) else dict(value or {})
    name = spec.get("name")
    if name not in kinds:
        raise InvalidSpecError(
            f"search.optuna.{what} must be one of {list(kinds)} (or {{'name': ...}}), got {value!r}"
        )
    unknown = sorted(set(spec) - {"name"} - options[str(name)])
    if unknown:
        raise InvalidSpecError(
            f"search.optuna.{what} {name!r} has unknown options {unknown}; known: {sorted(options[str(name)])}"
        )
    return spec


@dataclass(frozen=True)
class OptunaSearch:
    """An Optuna search spec: how many trials, over which space, sampled and pruned how.

    JSON::

        {"optuna": {"n_trials": 12, "metric": "val_loss", "mode": "min", "seed": 7,
                    "space": {"lr": {"loguniform": [1e-4, 1e-1]}, "batch_size": {"choice": [16, 32]}},
                    "sampler": {"name": "tpe", "constant_liar": true, "n_startup_trials": 4},
                    "pruner": {"name": "hyperband", "min_resource": 1, "max_resource": 4},
                    "storage": "sqlite:////shared/optuna.db"}}

    :param sampler: ``tpe`` (``constant_liar`` on by default, for parallel trials), ``random``,
        ``grid`` (every ``space`` entry a ``choice``) or ``cmaes`` (numeric spaces only).
    :param pruner: ``median``, ``successive_halving``, ``hyperband`` or ``none`` (default), judged on
        ``metric`` at each step the training function logs with ``ctx.log_metrics(..., step=...)``.
    :param storage: an SQLAlchemy URL every worker reaches, without a password (it travels in XCom),
        or ``"conn:<conn_id>"``, an Airflow connection resolved when a task opens the study; default
        a SQLite file beside a SQLite MLflow store. Not the Airflow metadata database itself: Optuna's migrations keep their own
        ``alembic_version`` table, which would collide with Airflow's (use another database or,
        on PostgreSQL, a schema: ``...?options=-csearch_path%3Doptuna``).
    """

    n_trials: int
    space: Mapping[str, Any]
    metric: str
    mode: str = "min"
    seed: int = 0
    sampler: Mapping[str, Any] = field(default_factory=lambda: {"name": "tpe"})
    pruner: Mapping[str, Any] = field(default_factory=lambda: {"name": "none"})
    storage: str | None = None

    @classmethod
    def coerce(cls, options: Any) -> OptunaSearch:
        if not isinstance(options, Mapping):
            raise InvalidSpecError("search.optuna must be a dict with n_trials, metric and space")
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidSpecError(
                f"search.optuna has unknown keys {unknown}; known: {sorted(cls.__dataclass_fields__)}"
            )
        try:
            search = cls(**dict(options))
            n_trials, seed = int(search.n_trials), int(search.seed)
        except (TypeError, ValueError) as err:
            raise InvalidSpecError(
                f"search.optuna needs n_trials, metric and space (integers where due): {err}"
            ) from err
        if n_trials < 1 or not search.metric or search.mode not in ("min", "max"):
            raise InvalidSpecError("search.optuna needs n_trials >= 1, a metric, and mode 'min' or 'max'")
        if not isinstance(search.space, Mapping) or not search.space:
            raise InvalidSpecError("search.optuna.space must map each hparam to a distribution")
        sampler = _named(search.sampler, SAMPLERS, _SAMPLER_OPTIONS, "sampler")
        pruner = _named(search.pruner, PRUNERS, _PRUNER_OPTIONS, "pruner")
        checked = cls(
            n_trials, dict(search.space), search.metric, search.mode, seed, sampler, pruner, search.storage
        )
        checked.distributions()  # every distribution checked before anything starts
        _check_storage(checked.storage)
        if sampler["name"] == "grid":
            checked.grid()
        return checked

    def to_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(self).items()}

    def identity(self) -> dict[str, Any]:
        """What defines the study: everything but ``n_trials`` (asking for more continues the study)."""
        return {k: v for k, v in self.to_dict().items() if k != "n_trials"}

    def distributions(self) -> dict[str, Any]:
        """Optuna distributions of ``space`` (the random search's syntax: choice, uniform, loguniform, randint)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out: dict[str, Any] = {}
        for key, dist in self.space.items():
            if not isinstance(dist, Mapping) or len(dist) != 1:
                raise InvalidSpecError(f"search.optuna.space.{key} must be one distribution, got {dist!r}")
            ((name, args),) = dist.items()
            if name == "choice" and isinstance(args, list) and args:
                out[key] = CategoricalDistribution(args)
                continue
            if (
                name not in ("uniform", "loguniform", "randint")
                or not isinstance(args, list)
                or len(args) != 2
            ):
                raise InvalidSpecError(
                    f"search.optuna.space.{key} must be {{'choice': [...]}}, {{'uniform': [lo, hi]}}, "
                    f"{{'loguniform': [lo, hi]}} or {{'randint': [lo, hi]}}; got {dist!r}"
                )
            low, high = float(args[0]), float(args[1])
            if not low <= high or (name == "loguniform" and low <= 0):
                raise InvalidSpecError(
                    f"search.optuna.space.{key}.{name} needs low <= high (and low > 0 for loguniform)"
                )
            if name == "randint":
                out[key] = IntDistribution(int(low), int(high))
            else:
                out[key] = FloatDistribution(low, high, log=name == "loguniform")
        return out

    def grid(self) -> dict[str, list[Any]]:
        grid = {k: v.get("choice") if isinstance(v, Mapping) else None for k, v in self.space.items()}
        bad = [k for k, v in grid.items() if not isinstance(v, list)]
        if bad:
            raise InvalidSpecError(
                f"search.optuna.sampler 'grid' needs every space entry as {{'choice': [...]}}: {bad}"
            )
        return {k: list(v) for k, v in grid.items() if v is not None}

    def make_sampler(self, seed: int | None = None) -> Any:
        import optuna

        options = {k: v for k, v in self.sampler.items() if k != "name"}
        options.setdefault("seed", self.seed)
        if seed is not None:
            options["seed"] = seed
        name = self.sampler["name"]
        if name == "tpe":
            options.setdefault("constant_liar", True)
            return optuna.samplers.TPESampler(**options)
        if name == "random":
            return optuna.samplers.RandomSampler(**options)
        if name == "grid":
            return optuna.samplers.GridSampler(self.grid(), **options)
        return optuna.samplers.CmaEsSampler(**options)

    def make_pruner(self) -> Any:
        return make_pruner(self.pruner)

    def stopping(self, storage: str, study_name: str) -> dict[str, Any] | None:
        """The trials' ``early_stopping`` spec: the pruner, judged through the study (None: no pruner)."""
        if self.pruner["name"] == "none":
            return None
        return {
            "rule": "optuna",
            "metric": self.metric,
            "mode": self.mode,
            "pruner": dict(self.pruner),
            "storage": storage,
            "study": study_name,
        }


# query parameters that hold a secret (a driver's password=, a token=, an api_key=...)
_SECRET_PARAMS = ("password", "passwd", "pwd", "token", "secret", "key", "credential", "auth")
_CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")


def _check_storage(storage: Any) -> None:
    """InvalidSpecError when ``storage`` is no URL or ``conn:<conn_id>``, or carries a credential; the
    message never repeats the value (it may be a secret)."""
    if storage is None:
        return
    if isinstance(storage, str) and storage.startswith(CONN_PREFIX):
        if not _CONN_ID.match(storage[len(CONN_PREFIX) :]):
            raise InvalidSpecError(
                "search.optuna.storage 'conn:' must be followed by an Airflow connection id (letters, "
                "digits, '_', '.', '-'), not a URL: create a connection holding the URL and give "
                "storage='conn:<conn_id>'"
            )
        return
    if not isinstance(storage, str) or "://" not in storage:
        raise InvalidSpecError(
            "search.optuna.storage must be an SQLAlchemy URL (e.g. 'postgresql://host/optuna') or "
            f"'conn:<conn_id>', got a {type(storage).__name__} that is neither"
        )
    found = storage_credentials(storage)
    if found:
        raise InvalidSpecError(
            f"search.optuna.storage carries a credential ({', '.join(found)}), which would be stored in "
            "XCom and MLflow and shown in the UI: put the URL in an Airflow connection and give "
            "storage='conn:<conn_id>'"
        )


def storage_credentials(url: str) -> list[str]:
    """Where ``url`` holds a credential: ``"the password"`` of its user part and ``"parameter NAME"``
    for each query parameter named like a secret; [] when it holds none."""
    parsed = urlsplit(url)
    found = ["the password"] if ":" in parsed.netloc.rpartition("@")[0] else []
    for name, _ in parse_qsl(parsed.query, keep_blank_values=True):
        if any(word in name.lower() for word in _SECRET_PARAMS):
            found.append(f"parameter {name[:40]!r}")
    return found


def redacted_storage(storage: str | None) -> str | None:
    """``storage`` safe to log or tag: a ``conn:`` id as given, a URL without its user part and query."""
    if not storage or storage.startswith(CONN_PREFIX):
        return storage
    parsed = urlsplit(storage)
    host = parsed.netloc.rpartition("@")[2]
    return f"{parsed.scheme}://{host}{parsed.path}{'?***' if parsed.query else ''}"


def make_pruner(spec: Mapping[str, Any]) -> Any:
    """The Optuna pruner of ``{"name": ..., **options}``."""
    import optuna

    options = {k: v for k, v in spec.items() if k != "name"}
    pruners = {
        "median": optuna.pruners.MedianPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "none": optuna.pruners.NopPruner,
    }
    return pruners[str(spec["name"])](**options)


def study_storage(url: str) -> Any:
    """An RDB storage for ``url``; SQLite waits for the other workers' writes instead of failing."""
    import optuna

    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


def open_study(search: OptunaSearch, storage: str, study_name: str) -> Any:
    """The search's study, created on first use (same name, same study: a re-run continues it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=study_name,
        storage=study_storage(storage),
        sampler=search.make_sampler(),
        pruner=search.make_pruner(),
        direction="minimize" if search.mode == "min" else "maximize",
        load_if_exists=True,
    )


def trial_name(params: Mapping[str, Any]) -> str:
    """A trial's name from its parameters alone (``trial-<10 hex>``): same parameters, same name."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)
    return "trial-" + hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class PlannedTrial:
    """One entry of an expansion: a known trial (``params``) or a slot that asks when it starts."""

    name: str
    params: dict[str, Any] | None = None
    slot: str | None = None


def plan_trials(study: Any, search: OptunaSearch, run_key: str) -> list[PlannedTrial]:
    """The study's trials for one expansion: its trials by parameters first, then slots to ask.

    The first ``n_trials`` trials of the study count (a smaller ``n_trials`` lists fewer of them;
    two trials that drew the same parameters are one entry). A trial left RUNNING by another DAG run
    (its worker died and its retries are spent) is failed, so the sampler no longer counts it as
    running and its place is asked again.
    """
    from optuna.trial import TrialState

    counted = []
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state == TrialState.RUNNING and t.user_attrs.get(RUN_ATTR) != run_key:
            log.warning(
                "Optuna trial %d (%s) was left running by %s: failing it.",
                t.number,
                t.params,
                t.user_attrs.get(RUN_ATTR),
            )
            study.tell(t.number, state=TrialState.FAIL)
        elif t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) and t.params:
            counted.append(t)
    counted = counted[: search.n_trials]
    known: dict[str, PlannedTrial] = {}
    for t in counted:
        known.setdefault(trial_name(t.params), PlannedTrial(trial_name(t.params), dict(t.params)))
    base = len(trials)
    slots = [
        PlannedTrial(f"ask-{base + i:03d}", None, f"{run_key}#{base + i}")
        for i in range(search.n_trials - len(counted))
    ]
    return [*known.values(), *slots]


def claim_trial(
    study: Any, search: OptunaSearch, run_key: str, *, slot: str | None, params: Mapping[str, Any] | None
) -> tuple[int, dict[str, Any], bool]:
    """``(number, params, finished)`` of the study trial this task runs.

    A slot asks the sampler once; its retries resume the trial it asked (the same parameters; a
    FAILED one is asked again with them). Known parameters reuse the study's trial with those
    parameters, else get a new RUNNING trial with exactly them.
    """
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if params is None:
        mine = [t for t in trials if t.user_attrs.get(SLOT_ATTR) == slot]
        if mine and mine[-1].state != TrialState.FAIL:
            return mine[-1].number, dict(mine[-1].params), mine[-1].state.is_finished()
        if not mine:
            # every task opens the study afresh: a sampler seeded alike in each would draw the same
            # point, so the seed moves on with the trials the study holds (reproducible in order)
            study.sampler = search.make_sampler(seed=search.seed + len(trials))
            trial = study.ask(search.distributions())
            trial.set_user_attr(SLOT_ATTR, slot)
            trial.set_user_attr(RUN_ATTR, run_key)
            return trial.number, dict(trial.params), False
        params = dict(mine[-1].params)
    same = [t for t in trials if t.params == dict(params) and t.state != TrialState.FAIL]
    if same:
        best = sorted(same, key=lambda t: (not t.state.is_finished(), t.number))[0]
        return best.number, dict(best.params), best.state.is_finished()
    return _add_running(study, search, dict(params), run_key, slot), dict(params), False


def _add_running(
    study: Any, search: OptunaSearch, params: dict[str, Any], run_key: str, slot: str | None
) -> int:
    """A new RUNNING trial with exactly ``params`` (enqueue-then-ask could hand them to another worker)."""
    import datetime

    import optuna
    from optuna.trial import TrialState

    dists = search.distributions()
    token = uuid.uuid4().hex
    attrs = {CLAIM_ATTR: token, RUN_ATTR: run_key, **({SLOT_ATTR: slot} if slot else {})}
    frozen = optuna.trial.create_trial(
        state=TrialState.WAITING, params=params, distributions=dists, user_attrs=attrs
    )
    frozen.state, frozen.datetime_start = TrialState.RUNNING, datetime.datetime.now()
    study.add_trial(frozen)
    return next(t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(CLAIM_ATTR) == token)


def finish_trial(study: Any, number: int, result: Mapping[str, Any], metric: str) -> str:
    """Tell the study how trial ``number`` ended: PRUNED when it stopped early, else its metric."""
    from optuna.trial import TrialState

    frozen = study.get_trials(deepcopy=False)[number]
    if frozen.state.is_finished():
        return frozen.state.name
    value = float((result.get("metrics") or {}).get(metric, math.nan))
    if result.get("stopped"):
        study.tell(number, state=TrialState.PRUNED)
        return "PRUNED"
    if not math.isfinite(value):
        study.tell(number, state=TrialState.FAIL)
        return "FAIL"
    study.tell(number, value)
    return "COMPLETE"


def fail_trial(study: Any, number: int) -> None:
    """Mark trial ``number`` FAILED (its task failed); a retry of its slot asks again with its parameters."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False)[number].state.is_finished():
        study.tell(number, state=TrialState.FAIL)


class OptunaPruneRule:
    """The study's pruner as an early-stopping rule: report each step, ask ``should_prune``."""

    def __init__(self, spec: Mapping[str, Any], number: int) -> None:
        import optuna
        from optuna.trial import Trial

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(
            study_name=str(spec["study"]),
            storage=study_storage(str(spec["storage"])),
            pruner=make_pruner(spec["pruner"]),
            sampler=optuna.samplers.RandomSampler(),
        )
        frozen = study.get_trials(deepcopy=False)[number]
        self.name = str(spec["pruner"]["name"])
        self.trial = Trial(study, frozen._trial_id)

    def report(self, value: float, step: int) -> tuple[bool, str]:
        """Report ``value`` at ``step``; ``(prune, reason)``."""
        self.trial.report(value, step)
        prune = self.trial.should_prune()
        verdict = "prunes" if prune else "keeps"
        return prune, f"Optuna's {self.name} pruner {verdict} the trial at step {step} ({value:.6g})"
