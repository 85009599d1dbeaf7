"""Deprecated: moved to :mod:`airflow_provider_dltrain.commands.champion` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.commands import champion as _moved

warnings.warn(
    "airflow_provider_dltrain.champion moved to airflow_provider_dltrain.commands.champion",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
