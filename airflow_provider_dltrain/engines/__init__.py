"""Where a stage runs: one protocol, one adapter per service (the job's own side is ``jobs/``). No Airflow.

``get_engine(name, clients, options)`` builds an adapter from its options object (or a mapping of
them); ``clients(service)`` returns a boto3 client (the Airflow layer makes them from an ``aws``
connection, a notebook from a boto3 session). Which names exist and what each runs is one table,
:mod:`~airflow_provider_dltrain.engines.placement`.
"""

from __future__ import annotations

from collections.abc import Callable
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
from airflow_provider_dltrain.engines.placement import (
    LOCAL,
    STAGE,
    TRAINING,
    build,
    checked_options,
    names,
    place,
)
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec

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
    """``options`` as the operator keeps them, checked where the DAG is defined: ``what`` is the
    user's word, ``"engine"`` (a stage's) or ``"backend"`` (training's); see
    :func:`~airflow_provider_dltrain.engines.placement.checked_options`."""
    return checked_options(name, options, STAGE if what == "engine" else TRAINING, word=what)


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
