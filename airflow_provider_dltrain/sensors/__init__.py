"""Sensors of this provider (importing them loads no deltalake, pyarrow, torch or pyspark)."""

from __future__ import annotations

from airflow_provider_dltrain.sensors.delta import DeltaTableVersionSensor

__all__ = ["DeltaTableVersionSensor"]
