"""run_training with backend="kubeflow" from a notebook: on a cluster, or on Docker on this machine."""


def on_a_cluster():
    # --8<-- [start:cluster]
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training import run_training

    result = run_training(
        "my_models.digits:train",  # the nodes import it by name (it travels in the code bundle)
        {"uri": "s3://my-lake/lake/digits", "version": 12},
        {"epochs": 12, "batch_size": 64, "seed": 7},
        backend="kubeflow",
        backend_options={
            "staging_uri": "s3://my-lake/dltrain-staging",
            "image": "registry.example.com/dltrain-train:1.0",
            "runtime": "dltrain-torch",
            "num_nodes": 2,
            "namespace": "ml",
            "service_account": "dltrain-lake-reader",
        },
        tracking=TrackingConfig(tracking_uri="https://mlflow.example.com"),
        run_key="digits-2026-12-04",  # a second call with the same key re-attaches to the TrainJob
    )
    print(result.model_uri, result.metrics)
    # --8<-- [end:cluster]
    return result


def on_docker():
    # --8<-- [start:docker]
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training import run_training

    result = run_training(
        "my_models.digits:train",
        {"uri": "/data/lake/digits", "version": 12},
        {"epochs": 2, "batch_size": 64, "seed": 7},
        backend="kubeflow",
        backend_options={
            "runtime_backend": "container",  # the SDK's Docker backend: a container per node
            "staging_uri": "/data/dltrain-staging",
            "image": "dltrain/train-kubeflow:local",  # local, without ENTRYPOINT (see the page)
            "num_nodes": 2,
            "container_mounts": ["/data"],  # the lake, the staging area and MLflow's store
            "environment": {"OMP_NUM_THREADS": "1"},
        },
        tracking=TrackingConfig(tracking_uri="sqlite:////data/mlflow.db"),
        run_key="digits-local",
    )
    # --8<-- [end:docker]
    return result
