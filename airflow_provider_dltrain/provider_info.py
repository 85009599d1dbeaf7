"""What ``airflow providers list`` and the connection UI learn about this provider."""

from __future__ import annotations

from airflow_provider_dltrain.version import __version__

PROVIDER_INFO: dict = {
    "package-name": "airflow-provider-dltrain",
    "name": "Deep-learning training (dltrain)",
    "description": "Spark ETL into versioned Delta tables, dataset-version sensors, distributed PyTorch "
    "training, MLflow promotion gates and Spark batch inference.",
    "versions": [__version__],
    "integrations": [
        {"integration-name": "Delta Lake", "external-doc-url": "https://delta.io/", "tags": ["software"]},
        {"integration-name": "MLflow", "external-doc-url": "https://mlflow.org/", "tags": ["software"]},
    ],
    "connection-types": [
        {
            "connection-type": "mlflow",
            "hook-class-name": "airflow_provider_dltrain.hooks.mlflow.MlflowHook",
            "hook-name": "MLflow",
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "port", "extra"],
                "relabeling": {"host": "Tracking URI", "login": "Username", "password": "Password or token"},
                "placeholders": {
                    "host": "http://mlflow.internal:5000 or sqlite:////path/mlflow.db",
                    "login": "optional: basic-auth user",
                    "password": "optional: password, or a bearer token when Username is empty",
                },
            },
            "conn-fields": {
                "registry_uri": {
                    "label": "Registry URI",
                    "description": "Model registry URI when it differs from the tracking URI",
                    "schema": {"type": ["string", "null"]},
                },
                "insecure_tls": {
                    "label": "Skip TLS verification",
                    "schema": {"type": ["boolean", "null"]},
                },
            },
        }
    ],
    "extra-links": [
        "airflow_provider_dltrain.operators.training.MlflowRunLink",
        "airflow_provider_dltrain.operators.engine_run.EngineJobLink",
    ],
}
