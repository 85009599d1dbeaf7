"""Where a stage runs: one protocol, one adapter per service (the job's own side is ``jobs/``). No Airflow.

``get_engine(name, clients, options)`` builds an adapter from its options object (or a mapping of
them); ``clients(service)`` returns a boto3 client (the Airflow layer makes them from an ``aws``
connection, a notebook from a boto3 session). Which names exist and what each runs is one table,
:mod:`~airflow_provider_dltrain.engines.placement`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.engines.base import (
    TERMINAL,
    Engine,
    JobFailedError,
    JobHandle,
    JobStatus,
    JobUserError,
    StagedRun,
    outcome,
    wait,
)
from airflow_provider_dltrain.engines.options import Options, options_dict
from airflow_provider_dltrain.engines.placement import LOCAL, STAGE, TRAINING, build, names, place
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.exceptions import InvalidSpecError

# what users may write: engine= of a stage, backend= of TrainModelOperator that runs as a job elsewhere
ENGINE_NAMES = names(STAGE)
TRAINING_ENGINE_NAMES = names(TRAINING, remote=True)


def check_engine_name(name: str) -> None:
    """Refuse an unknown engine name, listing the known ones (templated names are checked at run time)."""
    if "{{" in str(name):
        return
    place(name, STAGE)


def options_class(name: str) -> type[Options] | None:
    """The frozen dataclass of engine ``name``'s options (``GlueOptions``...); ``None`` for ``local``."""
    from airflow_provider_dltrain.engines.placement import PLACES

    where = PLACES.get(name)
    return where.options_class() if where is not None else None


def check_engine_options(name: Any, options: Any, *, what: str = "engine") -> Any:
    """``options`` as place ``name``'s options object, names and values checked: an unknown option is
    refused naming it and the valid ones, a missing or bad value naming the option (an options object
    of another place is refused the same way).

    This runs where the DAG is defined. A templated name or a Jinja string of options is kept as it
    is, and a mapping with a Jinja value keeps its form with its names checked: their values are
    checked when they are rendered and the engine is built. A place without an options class (``local``
    stages, a backend registered under a name of its own): the options as a mapping."""
    if not isinstance(name, str) or "{{" in name or isinstance(options, str):
        return options if options is not None else {}
    from airflow_provider_dltrain.engines.placement import PLACES

    where = PLACES.get(name)
    in_process_stage = what == "engine" and where is not None and not where.remote  # takes no options
    if where is None or where.options_class() is None or in_process_stage:
        return options_dict(options)
    if _templated(options):
        given = options_dict(options)
        _check_names(where, given, what)
        return given
    return where.options_of(options, what=what)


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return any(_templated(v) for v in options_dict(value).values())
    if isinstance(value, (list, tuple)):
        return any(_templated(v) for v in value)
    return False


def _check_names(where: Any, given: Mapping[str, Any], what: str) -> None:
    valid = sorted(f.name for f in dataclasses.fields(where.options_class()))
    for key in sorted(given, key=str):
        if key not in valid:
            raise InvalidSpecError(
                f"unknown {what} option {key!r} for {what} {where.name!r}; valid: {', '.join(valid)}"
            )


def get_engine(name: str, clients: Callable[[str], Any], options: Any = None) -> Engine:
    """The adapter ``name`` configured with ``options`` (a mapping, or the engine's options object);
    bad options name the engine and the problem."""
    return build(name, clients, options)  # type: ignore[no-any-return]


__all__ = [
    "ENGINE_NAMES",
    "LOCAL",
    "STAGE",
    "TRAINING",
    "Options",
    "TRAINING_ENGINE_NAMES",
    "TERMINAL",
    "Engine",
    "JobFailedError",
    "JobHandle",
    "JobStatus",
    "JobUserError",
    "RunIdentity",
    "RunSpec",
    "StagedRun",
    "check_engine_name",
    "check_engine_options",
    "get_engine",
    "options_class",
    "options_dict",
    "outcome",
    "wait",
]
