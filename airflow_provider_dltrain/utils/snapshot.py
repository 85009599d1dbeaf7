"""One read of a store per question while a plan looks at many dates: answers kept for one block.

A backfill plan asks the registry the same questions for every date (the versions promoted for
cut-offs in the date's month, the tracking store a connection names) and reads the same tables'
history for every date. Inside :func:`snapshot` the first answer to a question is kept and given
again, and each table is read in one state (:mod:`airflow_provider_dltrain.lake.state`: the same
block); outside it nothing is kept, so a task's own run always reads the stores afresh. The plan
reads one state of the stores, as a user reads one page.

A block that asks about many dates is *wide* (:func:`snapshot` with ``wide=True``): the registry's
month-by-month questions are then answered from one search of every version of the model
(:func:`~airflow_provider_dltrain.store.client.versions_tagged`), which a year's plan pays once
where a nightly's one month would cost less.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from airflow_provider_dltrain.lake.state import kept, one_state

T = TypeVar("T")

_WIDE = ("snapshot", "wide")


@contextlib.contextmanager
def snapshot(*, wide: bool = False) -> Iterator[None]:
    """The block: the lake's one state and the questions asked of the other stores share it.

    :param wide: the block asks about many dates (see the module).
    """
    with one_state():
        if wide:
            answers = kept()
            assert answers is not None
            answers[_WIDE] = True
        yield


def is_wide() -> bool:
    """Whether the current block is a wide :func:`snapshot` (False outside any)."""
    answers = kept()
    return bool(answers and answers.get(_WIDE))


def remembered(question: Hashable, answer: Callable[[], T]) -> T:
    """``answer()``, or inside :func:`snapshot` the answer this question got first there."""
    answers: dict[Any, Any] | None = kept()
    if answers is None:
        return answer()
    key = ("remembered", question)
    if key not in answers:
        answers[key] = answer()
    return answers[key]  # type: ignore[no-any-return]
