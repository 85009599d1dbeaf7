"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.loading` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import loading as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.loading moved to airflow_provider_dltrain.store.loading",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
