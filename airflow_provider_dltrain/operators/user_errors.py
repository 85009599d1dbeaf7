"""Map engine errors onto Airflow's retry semantics (Airflow layer only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airflow_provider_dltrain.exceptions import DltrainUserError


@contextlib.contextmanager
def fail_fast_on_user_error() -> Iterator[None]:
    """Re-raise :class:`DltrainUserError` as ``AirflowFailException``: retrying cannot fix bad input."""
    from airflow_provider_dltrain.airflow_compat import AirflowFailException

    try:
        yield
    except DltrainUserError as err:
        raise AirflowFailException(f"{type(err).__name__}: {err}") from err
