"""Deprecated: moved to :mod:`airflow_provider_dltrain.commands.reap` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.commands import reap as _moved

warnings.warn(
    "airflow_provider_dltrain.reap_command moved to airflow_provider_dltrain.commands.reap",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
