"""Deprecated: moved to :mod:`airflow_provider_dltrain.etl.rerun_check` (this name is the same module)."""

import sys
import warnings

from airflow_provider_dltrain.etl import rerun_check as _moved

warnings.warn(
    "airflow_provider_dltrain.jobs.rerun_check moved to airflow_provider_dltrain.etl.rerun_check",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
