"""Two additions to a nightly pipeline: a training run recorded in Weights & Biases beside MLflow, and
an ETL input read from a file that DVC versions in a git repository."""

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.operators import SparkToDeltaOperator, TrainModelOperator

with DAG(dag_id="docs_wandb", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:wandb]
    TrainModelOperator(
        task_id="train",
        dataset={"uri": "/data/lake/digits", "version": 12},  # or the sensor's output
        train_fn="my_pkg.train:train",
        hparams={"epochs": 5, "batch_size": 64, "lr": 0.01},
        extra_tracking={  # beside MLflow, which stays the registry and the gate's source
            "wandb": {
                "project": "digits",
                "entity": "my-team",  # default: the API key's entity
                "mode": "offline",  # or "online" (WANDB_API_KEY in the worker's environment)
                "required": False,  # True: a W&B failure fails the training run
                "tags": ["nightly"],
            }
        },
    )
    # --8<-- [end:wandb]

with DAG(dag_id="docs_dvc", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:dvc]
    SparkToDeltaOperator(
        task_id="ingest",
        table_uri="/data/lake/events",
        partition={"ds": "{{ data_interval_start | ds }}"},
        transform="my_pkg.etl:clean_events",
        inputs={
            "raw": {
                "dvc": {
                    "repo": "https://github.com/my-org/datasets.git",  # or a local clone's path
                    "path": "events/raw.csv",  # a file added with `dvc add`
                    # a tag or commit; a branch or HEAD (the default) is pinned per date to the commit
                    # the date's last write recorded (docs: "A backfill reads what the nightly read")
                    "rev": "{{ params.data_rev }}",
                },
                "format": "csv",
                "options": {"header": "true"},
            }
        },
        params={"data_rev": "v3"},
    )
    # --8<-- [end:dvc]
