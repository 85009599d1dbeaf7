"""Airflow core classes the tests use whose home moved between 3.1 and 3.3 (the provider's own moved
names are in ``airflow_provider_dltrain.airflow_compat``): one place, so every cell of
``make test-compat`` runs the same tests."""

from __future__ import annotations

from typing import Any


def dag_bag(dag_folder: str) -> Any:
    """Airflow's DagBag of ``dag_folder``, the parse the DAG processor makes (examples: the configuration's)."""
    try:  # Airflow 3.2+
        from airflow.dag_processing.dagbag import DagBag
    except ModuleNotFoundError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=dag_folder)


def serialized_round_trip(dag: Any) -> Any:
    """``dag`` as the scheduler sees it: serialized to the metadata DB's JSON and read back."""
    try:  # Airflow 3.2+
        from airflow.serialization.serialized_objects import DagSerialization as serializer
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serialized_objects import SerializedDAG as serializer
    return serializer.from_dict(serializer.to_dict(dag))
