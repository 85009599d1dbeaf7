"""Gate policies: an absolute floor, ties decided by a later cut-off or a secondary metric, and
MLflow-style thresholds."""

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.operators import RegisterModelOperator

with DAG(dag_id="docs_gate_policy", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    trained = {"run_id": "...", "model_uri": "runs:/.../model"}  # in a DAG: the training task's .output
    # --8<-- [start:policy]
    RegisterModelOperator(
        task_id="register",
        train_result=trained,
        model_name="wine",
        metric="val_accuracy",
        mode="max",
        data_cutoff="{{ data_interval_start | ds }}",
        evaluate_fn="my_pkg.model:evaluate_model",  # returns val_accuracy and val_loss
        gate_policy={
            "min_value": 0.9,  # never promote a model under 90 %, not even the first
            "ties": "later_cutoff",  # same accuracy on more data: promote
            "secondary": [
                {"metric": "val_loss", "mode": "min", "role": "tiebreak"},  # before the cut-off rule
            ],
        },
    )
    # MLflow-style thresholds: promote only a 2 % relative gain in loss that keeps accuracy within 0.01
    loss_gate = {
        "min_relative_change": 0.02,
        "secondary": [
            {"metric": "val_accuracy", "mode": "max", "role": "no_regress", "max_regression": 0.01}
        ],
    }
    # --8<-- [end:policy]
    RegisterModelOperator(
        task_id="register_on_loss",
        train_result=trained,
        model_name="wine",
        metric="val_loss",
        mode="min",
        data_cutoff="{{ data_interval_start | ds }}",
        gate_policy=loss_gate,
    )
