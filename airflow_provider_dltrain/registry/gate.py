"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.gate` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import gate as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.gate moved to airflow_provider_dltrain.store.gate",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
