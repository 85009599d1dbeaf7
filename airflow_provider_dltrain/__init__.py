"""airflow-provider-dltrain: deep-learning pipelines on versioned Delta tables for Apache Airflow 3."""

from __future__ import annotations

from airflow_provider_dltrain.version import __version__

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
    from airflow_provider_dltrain.provider_info import PROVIDER_INFO

    return PROVIDER_INFO
