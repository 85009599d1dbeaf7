"""Where work runs, said once: the placement table every list, check and factory of engines reads.

A *place* is a name a user writes - ``engine=`` of a stage (``SparkToDeltaOperator``,
``SparkBatchInferenceOperator``) or ``backend=`` of ``TrainModelOperator`` - with its options class,
its factory and what it can run (a stage, training, or both: ``ec2`` runs either). Places that run a
job elsewhere are the adapters of this package, named here by module so that listing them imports
no SDK; places that run in this process (``local``, ``ddp``, ``torch_distributor``, ``horovod``, a
backend a user registers) are added by ``training.backends``, which owns them. Each options class
derives :class:`~airflow_provider_dltrain.engines.options.Options`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.options import Options, options_dict
from airflow_provider_dltrain.exceptions import InvalidSpecError

STAGE, TRAINING = "stage", "training"
LOCAL = "local"


@dataclass(frozen=True)
class Place:
    """One name users write, what it can run and how it is built.

    ``remote``: a job elsewhere, built as ``factory(clients, options)`` by an adapter of this package
    (``factory`` and ``options`` are ``"module:Class"`` inside ``engines``); otherwise in this process,
    built as ``factory(options)`` (``factory`` and ``options`` are the objects themselves).
    ``regional``: its console links and clients need an AWS region (defaulted from the connection).
    """

    name: str
    runs: frozenset[str]
    factory: Any = None
    options: Any = None
    remote: bool = True
    regional: bool = True

    def options_class(self) -> type[Options] | None:
        return _resolve(self.options) if isinstance(self.options, str) else self.options

    def factory_of(self) -> Callable[..., Any] | None:
        return _resolve(self.factory) if isinstance(self.factory, str) else self.factory

    def options_of(self, options: Any, *, what: str = "engine") -> Any:
        """``options`` as this place's options object (checked); a mapping as it is where there is no class."""
        cls = self.options_class()
        if cls is None:
            return options_dict(options)
        return cls.of(options, what=f"{what} option", name=self.name)


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(f"airflow_provider_dltrain.engines.{module}"), attr)


def _adapter(name: str, module: str, cls: str, runs: set[str], *, regional: bool = True) -> Place:
    return Place(name, frozenset(runs), f"{module}:{cls}Engine", f"{module}:{cls}Options", True, regional)


PLACES: dict[str, Place] = {
    p.name: p
    for p in (
        # a stage in this process (the training side of "local" is added by training.backends)
        Place(LOCAL, frozenset({STAGE}), None, None, remote=False, regional=False),
        _adapter("glue", "glue", "Glue", {STAGE}),
        _adapter("emr", "emr", "Emr", {STAGE}),
        _adapter("emr_serverless", "emr_serverless", "EmrServerless", {STAGE}),
        _adapter("spark_submit", "spark_submit", "SparkSubmit", {STAGE}, regional=False),
        _adapter("sagemaker_processing", "sagemaker_processing", "SageMakerProcessing", {STAGE}),
        # ec2 runs a stage on one instance (Spark local[*]) with the cluster training uses
        _adapter("ec2", "ec2", "Ec2", {STAGE, TRAINING}),
        _adapter("sagemaker", "sagemaker", "SageMaker", {TRAINING}),
        _adapter("ray", "ray_jobs", "Ray", {TRAINING}, regional=False),
        _adapter("kubeflow", "kubeflow", "Kubeflow", {TRAINING}, regional=False),
    )
}


def add_place(place: Place) -> None:
    """Add (or replace) a place; a name already placed for another role keeps that role (``local``)."""
    known = PLACES.get(place.name)
    if known is not None and not (known.runs & place.runs):
        place = dataclasses.replace(place, runs=known.runs | place.runs)
    PLACES[place.name] = place


def names(runs: str, *, remote: bool | None = None) -> tuple[str, ...]:
    """The names that can run ``runs`` (``STAGE`` or ``TRAINING``), in the table's order."""
    return tuple(p.name for p in PLACES.values() if runs in p.runs and (remote is None or p.remote == remote))


def place(name: Any, runs: str | None = None, *, word: str = "engine") -> Place:
    """The place ``name``, refused (listing the known ones) when unknown or unable to run ``runs``."""
    known = PLACES.get(name) if isinstance(name, str) else None
    if known is None or (runs is not None and runs not in known.runs):
        choices = names(runs) if runs else tuple(PLACES)
        raise InvalidSpecError(f"{word}={name!r} is not available; choose one of {choices}")
    return known


def build(name: str, clients: Callable[[str], Any], options: Any = None) -> Any:
    """The adapter ``name`` built from ``options`` (a mapping or its options object, checked here)."""
    where = place(name)
    factory = where.factory_of()
    if not where.remote or factory is None:
        raise InvalidSpecError(f"engine={name!r} runs in-process and has no adapter")
    return factory(clients, where.options_of(options))


def checked_options(name: Any, options: Any, runs: str, *, word: str = "engine") -> Any:
    """``options`` for place ``name`` running ``runs`` (``STAGE`` or ``TRAINING``) as an operator keeps
    them: the place's options object, names and values checked (an unknown option is refused naming it
    and the valid ones, a missing or bad value naming the option, an options object of another place
    the same way). ``word`` is what the user wrote, ``engine`` or ``backend``.

    A templated name or a Jinja string of options is kept as it is, and a mapping with a Jinja value
    keeps its form with its names checked: their values are checked once rendered, when the engine
    is built. A place without options (``local`` stages, a backend registered under a name of its
    own): the options as a mapping."""
    if not isinstance(name, str) or "{{" in name or isinstance(options, str):
        return options if options is not None else {}
    where = PLACES.get(name)
    cls = where.options_class() if where is not None else None
    if where is None or cls is None or (runs == STAGE and not where.remote):  # in-process stages take none
        return options_dict(options)
    if _templated(options):
        return cls.known(options_dict(options), what=f"{word} option", name=name)
    return where.options_of(options, what=word)


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return any(_templated(v) for v in options_dict(value).values())
    if isinstance(value, (list, tuple)):
        return any(_templated(v) for v in value)
    return False


def with_region(name: str, options: Any, region: str | None) -> Any:
    """``options`` with ``region`` filled in where the place is regional and the options leave it unset."""
    where = PLACES.get(name)
    if where is None or not where.regional or region is None:
        return options
    if isinstance(options, Options):
        return options if getattr(options, "region", None) else dataclasses.replace(options, region=region)  # type: ignore[type-var]
    values = options_dict(options) if not isinstance(options, Mapping) else dict(options)
    values.setdefault("region", region)
    return values
