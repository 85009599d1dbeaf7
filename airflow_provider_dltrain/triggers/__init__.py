"""Triggers of this provider (importing them loads no deltalake, pyarrow, torch or pyspark)."""

from __future__ import annotations

from airflow_provider_dltrain.triggers.delta import DeltaTableNewVersionTrigger, DeltaTableVersionTrigger

__all__ = ["DeltaTableNewVersionTrigger", "DeltaTableVersionTrigger"]
