"""What moved between the Airflow minors the provider supports (3.1 to 3.3), handled once here.

The Airflow layer imports these names from here, never from where one minor keeps them, so the
provider imports on every minor of the matrix (docs/install.md); ``make test-compat`` runs the cells
on both sides of each difference. Airflow 3.2 moved the configuration and the task exceptions into
the task SDK (``airflow.sdk.configuration``, ``airflow.sdk.exceptions``); 3.3 deprecates the old
places, 3.1 has only them. The classes are the same objects on each side: an ``except`` or a
``pytest.raises`` with these names catches what Airflow raises on every minor.
"""

from __future__ import annotations

try:  # Airflow 3.2+: the task SDK's own parser, which does not import Airflow's core
    from airflow.sdk.configuration import conf
except ModuleNotFoundError:  # Airflow 3.1
    from airflow.configuration import conf

try:  # Airflow 3.2+
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
        TaskDeferred,
    )
except ImportError:  # Airflow 3.1: airflow.sdk.exceptions lacks the task exceptions
    from airflow.exceptions import (  # type: ignore[assignment,no-redef]
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
        TaskDeferred,
    )

__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "TaskDeferred",
    "conf",
    "default_deferrable",
]


def default_deferrable() -> bool:
    """Whether operators and sensors defer unless told otherwise: ``[operators] default_deferrable``."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)
