"""run_training from a notebook, without Airflow: the same cloud backends as the operator."""


def on_sagemaker():
    # --8<-- [start:sagemaker]
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training import run_training

    result = run_training(
        "mypkg.model:train",  # the job imports it by name
        {"uri": "s3://my-lake/lake/digits", "version": 7},
        {"epochs": 12, "batch_size": 32, "lr": 3e-3},
        backend="sagemaker",  # or "ec2"
        backend_options={
            "staging_uri": "s3://my-lake/staging",
            "role": "arn:aws:iam::123456789012:role/SageMakerRole",
            "instance_count": 2,
            "region": "eu-west-1",
            "tracking_secret": "dltrain/mlflow",
        },
        data_filter=[["ds", "<=", "2026-11-28"]],
        tracking=TrackingConfig(tracking_uri="https://mlflow.example.com"),
        poll_interval=30,
    )
    print(result.model_uri, result.metrics)
    # --8<-- [end:sagemaker]


def on_ray():
    # --8<-- [start:ray]
    from airflow_provider_dltrain.training import run_training

    result = run_training(
        "my_models.digits:train",
        {"uri": "/data/lake/digits", "version": 12},
        {"epochs": 12, "batch_size": 64, "seed": 7},
        backend="ray",
        backend_options={
            "address": "http://127.0.0.1:8265",
            "staging_uri": "/shared/dltrain",
            "num_workers": 2,
        },
        run_key="digits-2026-12-04",
    )
    # --8<-- [end:ray]
    return result
