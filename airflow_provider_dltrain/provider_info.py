"""What ``airflow providers list`` and the connection UI learn about this provider."""

from __future__ import annotations

from airflow_provider_dltrain import __version__

PROVIDER_INFO: dict = {
    "package-name": "airflow-provider-dltrain",
    "name": "Deep-learning training (dltrain)",
    "description": "Spark ETL into versioned Delta tables, dataset-version sensors, distributed PyTorch "
    "training, MLflow promotion gates and Spark batch inference.",
    "versions": [__version__],
    "connection-types": [],
    "extra-links": [],
}
