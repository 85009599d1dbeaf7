"""``run_training`` in-process: reproducibility, MLflow records, loadable models, clear failures."""

from __future__ import annotations

import json

import mlflow
import pytest
import torch
from training_digits import DAYS

from airflow_provider_dltrain import __version__
from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError, TrainingFailedError
from airflow_provider_dltrain.training import (
    TAG_KEYS,
    LocalBackend,
    TrainResult,
    code_hash,
    fingerprint,
    params_hash,
    run_training,
)

FAST = {"epochs": 3, "batch_size": 64, "seed": 3}
LOCAL = {"num_threads": 1}  # 2 cores shared with other suites: one thread is fastest for this model


def test_same_seed_and_same_version_give_the_same_split_and_the_same_metrics(digits_ref, tmp_path):
    results = []
    for attempt in range(2):
        trace = tmp_path / f"trace{attempt}"
        trace.mkdir()
        result = run_training(
            "training_fns:traced_demo_train",
            digits_ref,
            {**FAST, "trace_dir": str(trace)},
            backend_options=LOCAL,
            tracking=False,
        )
        validation = json.loads((trace / "validation-epoch0-rank0.json").read_text())
        train = json.loads((trace / "train-epoch0-rank0.json").read_text())
        results.append((result.metrics, sorted(validation), train))
    assert results[0][0] == results[1][0]  # bit-identical metrics on CPU
    assert results[0][1] == results[1][1]  # same validation rows
    assert results[0][2] == results[1][2]  # same shuffled training order
    other_seed = run_training(
        "training_fns:traced_demo_train", digits_ref, {**FAST, "seed": 4}, tracking=False
    )
    assert other_seed.metrics != results[0][0]


def test_mlflow_run_records_dataset_version_lineage_tags_params_metrics_and_a_loadable_model(
    digits_ref, tracking
):
    from airflow_provider_dltrain.demo.digits_model import train

    cutoff_filter = [["ds", "<=", DAYS[2]]]
    result = run_training(
        train,
        digits_ref,
        {**FAST, "optimizer": {"name": "adam"}},
        backend=LocalBackend(num_threads=1),
        data_filter=cutoff_filter,
        tracking=tracking,
        experiment_name="digits-tests",
        tags={
            "dltrain.dag_id": "nightly",
            "dltrain.run_id": "manual__1",
            "dltrain.logical_date": "2026-11-28",
        },
    )
    client = tracking.client()
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert set(TAG_KEYS) <= set(tags)
    assert json.loads(tags["dltrain.delta_ref"]) == digits_ref.to_dict()
    assert tags["dltrain.delta_uri"] == digits_ref.uri and tags["dltrain.delta_version"] == str(
        digits_ref.version
    )
    assert tags["dltrain.data_cutoff"] == DAYS[2]
    assert tags["dltrain.provider_version"] == __version__
    assert tags["dltrain.code_hash"] == code_hash(train) == result.code_hash
    assert tags["dltrain.params_hash"] == params_hash({**FAST, "optimizer": {"name": "adam"}})
    assert (
        tags["dltrain.data_fingerprint"] == fingerprint(digits_ref, cutoff_filter) == result.data_fingerprint
    )
    assert run.data.params["optimizer.name"] == "adam" and run.data.params["epochs"] == "3"

    (dataset_input,) = run.inputs.dataset_inputs
    source = json.loads(dataset_input.dataset.source)
    assert dataset_input.dataset.source_type == "delta_table"
    assert source["path"] == digits_ref.uri and source["delta_table_version"] == digits_ref.version
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "training"

    history = client.get_metric_history(result.run_id, "val_accuracy")
    assert sorted(m.step for m in history) == [0, 1, 2]
    assert result.metrics["val_accuracy"] == pytest.approx(max(history, key=lambda m: m.step).value)

    tracking.apply()
    model = mlflow.pytorch.load_model(result.model_uri)  # MLflow 3.17 defaults: pt2 export, no pickle
    batch = torch.rand(7, 64)  # a batch size the input example did not have
    assert model(batch).shape == (7, 10)
    info = mlflow.models.get_model_info(result.model_uri)
    assert list(info.signature.inputs.to_dict()[0]["tensor-spec"]["shape"]) == [-1, 64]


def test_train_result_round_trips_through_json_for_xcom(digits_ref):
    result = run_training(
        "training_fns:traced_demo_train", digits_ref, FAST, backend_options=LOCAL, tracking=False
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert {"run_id", "model_uri", "metrics", "dataset", "params"} <= set(data)
    assert data["dataset"] == digits_ref.to_dict()
    assert TrainResult.from_dict(data) == result
    state = torch.load(result.model_uri)  # tracking off: the state_dict under the run directory
    assert "fc2.weight" in state


def test_a_bug_in_the_training_function_fails_with_its_traceback_and_marks_the_run_failed(
    digits_ref, tracking
):
    with pytest.raises(TrainingFailedError) as caught:
        run_training("training_fns:failing_train", digits_ref, {"fail_rank": 0}, tracking=tracking)
    assert not isinstance(caught.value, DltrainUserError)  # may be transient: Airflow may retry it
    assert "rank 0 of 1" in str(caught.value) and "ValueError: boom on rank 0" in str(caught.value)
    assert 'training_fns.py", line' in str(caught.value)
    (run,) = tracking.client().search_runs(
        [tracking.client().get_experiment_by_name("dltrain").experiment_id]
    )
    assert run.info.status == "FAILED"


def test_a_data_error_in_the_training_function_is_a_user_error_that_is_not_retried(digits_ref):
    with pytest.raises(DltrainUserError, match="row 7"):
        run_training(
            "training_fns:failing_train", digits_ref, {"fail_rank": 0, "user_error": True}, tracking=False
        )


def test_bad_train_fn_dataset_and_backend_are_refused_before_anything_runs(digits_ref):
    with pytest.raises(InvalidSpecError, match="no attribute 'nope'"):
        run_training("training_fns:nope", digits_ref, tracking=False)
    with pytest.raises(InvalidSpecError, match=r"package\.module:function"):
        run_training("training_fns.traced_demo_train", digits_ref, tracking=False)
    with pytest.raises(InvalidSpecError, match="unknown training backend 'sagemakr'"):
        run_training("training_fns:traced_demo_train", digits_ref, backend="sagemakr", tracking=False)
    with pytest.raises(InvalidSpecError, match="DeltaRef"):
        run_training("training_fns:traced_demo_train", {"uri": digits_ref.uri}, tracking=False)


def test_hashes_ignore_key_order_and_follow_the_code():
    assert params_hash({"lr": 0.1, "epochs": 3}) == params_hash({"epochs": 3, "lr": 0.1})
    assert params_hash({"lr": 0.1}) != params_hash({"lr": 0.2})
    from training_fns import failing_train, traced_demo_train

    assert code_hash(traced_demo_train) != code_hash(failing_train)
    assert code_hash(traced_demo_train) == code_hash(traced_demo_train)


def test_a_train_fn_defined_in_a_dag_file_is_shipped_by_value_to_fresh_processes(tmp_path):
    import importlib.util
    import subprocess
    import sys

    from airflow_provider_dltrain.training.pickling import dumps

    source = tmp_path / "my_dag.py"
    source.write_text("SCALE = 2.0\n\ndef train(ctx):\n    return {'answer': 21.0 * SCALE}\n")
    # the synthetic module name Airflow gives a DAG file: no fresh process can import it
    spec = importlib.util.spec_from_file_location("unusual_prefix_0123_my_dag", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    payload = dumps({"fn": module.train}, module.train)
    code = (
        "import sys; from airflow_provider_dltrain.training.pickling import loads; "
        "print(loads(sys.stdin.buffer.read())['fn'](None))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=True)
    assert out.stdout.decode().strip().splitlines()[-1] == "{'answer': 42.0}"
