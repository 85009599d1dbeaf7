"""One read of a store per question while a plan looks at many dates: answers kept for one block.

A backfill plan asks the registry the same questions for every date (the versions promoted for
cut-offs in the date's month, the tracking store a connection names). Inside :func:`snapshot` the
first answer to a question is kept and given again; outside it nothing is kept, so a task's own run
always reads the store afresh. The plan reads one state of the stores, as a user reads one page.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")
_ANSWERS: ContextVar[dict[Hashable, Any] | None] = ContextVar("dltrain_snapshot", default=None)


@contextmanager
def snapshot() -> Iterator[None]:
    """Within the block, :func:`remembered` answers each question once."""
    token = _ANSWERS.set({})
    try:
        yield
    finally:
        _ANSWERS.reset(token)


def remembered(question: Hashable, answer: Callable[[], T]) -> T:
    """``answer()``, or inside :func:`snapshot` the answer this question got first there."""
    answers = _ANSWERS.get()
    if answers is None:
        return answer()
    if question not in answers:
        answers[question] = answer()
    return answers[question]  # type: ignore[no-any-return]
