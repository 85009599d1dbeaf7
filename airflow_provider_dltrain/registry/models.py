"""Deprecated: moved to :mod:`airflow_provider_dltrain.store.models` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.store import models as _moved

warnings.warn(
    "airflow_provider_dltrain.registry.models moved to airflow_provider_dltrain.store.models",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
