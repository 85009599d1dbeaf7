"""A transform that refuses an unusable input at once (no retries) and names what is wrong."""

from airflow_provider_dltrain.etl import require_columns
from airflow_provider_dltrain.exceptions import DltrainUserError


def decode(spark, inputs, params):
    labels = require_columns(inputs["labels"], ["file", "label"])
    # SchemaMismatchError: input 'labels' (/data/landing/2026-11-24/labels.csv) has no column 'label':
    # its columns are ['file', 'lbl'], the transform expects ['file', 'label']. ...
    if params.get("source") not in ("scanner", "phone"):
        raise DltrainUserError(
            f"transform_params['source'] must be 'scanner' or 'phone', got {params.get('source')!r}"
        )
    return labels
