"""The modes of ``non_finite`` (what a NaN or infinite training metric does), checkable anywhere.

A leaf: the job specs of ``engines/`` and the training code of ``training/finite.py`` both check a
mode here, so the transport layer needs nothing from the training package.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

FAIL_AT_END, FAIL_AT_ANY_STEP, ALLOW = "fail_at_end", "fail_at_any_step", "allow"
NON_FINITE_MODES = (FAIL_AT_END, FAIL_AT_ANY_STEP, ALLOW)


def check_mode(value: Any, field: str = "non_finite") -> str:
    """``value`` when it is one of :data:`NON_FINITE_MODES`, else :class:`InvalidSpecError` naming ``field``."""
    if value not in NON_FINITE_MODES:
        raise InvalidSpecError(f"{field} must be one of {list(NON_FINITE_MODES)}, got {value!r}")
    return str(value)
