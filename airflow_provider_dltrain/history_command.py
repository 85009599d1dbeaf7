"""Deprecated: moved to :mod:`airflow_provider_dltrain.commands.history` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.commands import history as _moved

warnings.warn(
    "airflow_provider_dltrain.history_command moved to airflow_provider_dltrain.commands.history",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
