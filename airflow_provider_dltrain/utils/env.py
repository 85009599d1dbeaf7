"""Environment variables set for one block and put back exactly afterwards (no Airflow).

The one save/restore helper of the package: credentials, MLflow URIs and switches such as
``MLFLOW_ALLOW_PICKLE_DESERIALIZATION`` are set only around the calls that read them, so a child
process started later (a torchrun rank, a Spark worker) never inherits them by accident.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

# The MLflow credentials a process may hold in its environment (the job specs carry none of them).
CREDENTIAL_KEYS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


@contextlib.contextmanager
def scoped_environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``changes`` applied for the block (``None`` removes a variable).

    Every variable named in ``changes`` gets its previous value back afterwards - removed if it was
    unset - also when the block raises. Not thread-safe: ``os.environ`` is process-wide.
    """
    saved = {key: os.environ.get(key) for key in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, previous in saved.items():
            if previous is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = previous
