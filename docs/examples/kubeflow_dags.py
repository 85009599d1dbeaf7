"""Training as a Kubeflow Trainer TrainJob: the DAG, on a cluster with the runtime of kubeflow/runtime.yaml."""

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.operators import TrainModelOperator

PINNED = {"uri": "s3://my-lake/lake/digits", "version": 12}  # in a DAG: the sensor's .output

with DAG(dag_id="docs_kubeflow", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:dag]
    train = TrainModelOperator(
        task_id="train",
        dataset=PINNED,
        train_fn="my_models.digits:train",
        hparams={"epochs": 12, "batch_size": 64, "seed": 7},
        backend="kubeflow",
        backend_options={
            "staging_uri": "s3://my-lake/dltrain-staging",
            "image": "registry.example.com/dltrain-train:1.0",
            "runtime": "dltrain-torch",  # the ClusterTrainingRuntime of kubeflow/runtime.yaml
            "num_nodes": 4,
            "resources_per_node": {"cpu": 8, "memory": "32Gi", "gpu": 1},
            "namespace": "ml",
            "service_account": "dltrain-lake-reader",  # may read the lake and write the staging area
            "tracking_secret": "mlflow-credentials",  # a Secret with MLFLOW_TRACKING_* keys
            "dashboard_url": "https://kubeflow.example.com/trainjobs/{namespace}/{name}",
        },
        deferrable=True,
        aws_conn_id="aws_lake",  # the launcher's access to an s3:// staging_uri and s3:// tables
    )
    # --8<-- [end:dag]
