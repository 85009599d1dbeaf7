"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.resolve` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import resolve as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.resolve moved to airflow_provider_dltrain.store.resolve",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
