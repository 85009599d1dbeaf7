"""Kubeflow on Docker with the lake on S3 (the fake AWS here; any S3 store the same way), then the gate.

The fake runs with ``--host`` on the Docker bridge's gateway, so the node containers reach it, and
writes its per-start keys and endpoint to a 0600 file; the same file points this process at it
(``source``) and is the TrainJob's secret, mounted read-only into every node::

    GATEWAY=$(ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1)  # e.g. 172.17.0.1
    dltrain fake-aws --host "$GATEWAY" --bucket lake --env-file ~/.dltrain/fake-aws.env &
    set -a; . ~/.dltrain/fake-aws.env; set +a
"""

from __future__ import annotations

from typing import Any


def train_and_gate(
    env_file: str,
    table: dict[str, Any],
    image: str,
    mlflow_dir: str,
    *,
    train_fn: str = "my_models.digits:train",
    day: str = "2026-11-25",
) -> Any:
    """Train on two nodes of the Docker backend from the table on S3, register, promote if it is better."""
    # --8<-- [start:train]
    from mlflow import MlflowClient

    from airflow_provider_dltrain.registry import GateSpec, register_and_promote
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training import run_training

    tracking = TrackingConfig(tracking_uri=f"sqlite:///{mlflow_dir}/mlflow.db")
    mlflow = MlflowClient(tracking.tracking_uri)  # artifacts beside the store, where the nodes mount it
    if mlflow.get_experiment_by_name("digits-kubeflow") is None:
        mlflow.create_experiment("digits-kubeflow", artifact_location=f"{mlflow_dir}/artifacts")
    result = run_training(
        train_fn,  # e.g. "my_models.digits:train": the nodes import it from the code bundle
        table,  # {"uri": "s3://lake/lake/digits", "version": 12}: the pinned version on S3
        {"epochs": 2, "batch_size": 16, "seed": 3},
        backend="kubeflow",
        backend_options={
            "runtime_backend": "container",  # the SDK's Docker backend: a container per node
            "image": image,  # local, without ENTRYPOINT (see the page)
            "num_nodes": 2,
            "staging_uri": "s3://lake/dltrain-staging",  # spec, code, rank reports: on S3 too
            # the store's keys and endpoint: mounted read-only into every node, never its environment
            "secret_env_file": env_file,
            "container_mounts": [mlflow_dir],  # MLflow's SQLite store and artifacts on this disk
            "environment": {"OMP_NUM_THREADS": "1"},
        },
        data_filter=[["ds", "<=", day]],
        tracking=tracking,
        experiment_name="digits-kubeflow",
        run_key=f"digits-{day}",  # a second call re-attaches to the TrainJob
        poll_interval=1.0,
    )
    model = register_and_promote(
        tracking,
        model_name="digits",
        model_uri=result.model_uri,
        run_id=result.run_id,
        metrics=result.metrics,
        gate=GateSpec("val_accuracy", "max"),  # promoted when it beats the champion
    )
    # --8<-- [end:train]
    return result, model
