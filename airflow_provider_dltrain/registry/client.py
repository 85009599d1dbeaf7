"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.client` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import client as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.client moved to airflow_provider_dltrain.store.client",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
