"""Deprecated: moved to :mod:`airflow_provider_dltrain.commands.connections` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.commands import connections as _moved

warnings.warn(
    "airflow_provider_dltrain.connections moved to airflow_provider_dltrain.commands.connections",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
