"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.config` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import config as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.config moved to airflow_provider_dltrain.store.config",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
