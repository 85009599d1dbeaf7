"""One state of the lake for a block of reads: what a backfill plan over many dates reads once.

Inside :func:`one_state` a table's history index is loaded once (:func:`.history_index.load` keeps it,
and reads again only for a version it does not hold) and the log's immutable files a partition check
reads (commit files, checkpoints) are parsed once; outside it nothing is kept, so a task's own run
always reads the table afresh. The plan reads one state of the lake, as a user reads one page
(:func:`airflow_provider_dltrain.utils.snapshot.snapshot` is this block, for the registry's answers too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_KEPT: ContextVar[dict[Any, Any] | None] = ContextVar("dltrain_lake_state", default=None)


@contextmanager
def one_state() -> Iterator[None]:
    """Within the block, what :func:`kept` holds is shared by every read (see the module)."""
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def kept() -> dict[Any, Any] | None:
    """The block's answers by question, or None outside :func:`one_state`."""
    return _KEPT.get()
