"""W&B beside MLflow: the offline run files, read with W&B's own reader, hold what the run was."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError, TrainingFailedError
from airflow_provider_dltrain.operators.training import TrainModelOperator
from airflow_provider_dltrain.training import TrainResult, run_training

pytest.importorskip("wandb")

SECRET = "hunter2-secret-value"


def _records(run_dir: str) -> list[dict[str, Any]]:
    """The records of the run's ``.wandb`` transaction log, as ``wandb leet inspect --json`` prints them."""
    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    wandb_cli = os.path.join(os.path.dirname(sys.executable), "wandb")
    out = subprocess.run(
        [wandb_cli, "leet", "inspect", "--json", path], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def steps_train(ctx: Any) -> dict[str, float]:
    """Three logged steps and, with ``hparams["save"]``, a one-layer model: the cheapest run through
    rank 0's tracker (the digits demo takes seconds more for the same records)."""
    import torch

    for step in range(3):
        ctx.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    if ctx.hparams.get("save"):
        ctx.save_model(torch.nn.Linear(2, 1), input_example=torch.zeros(2, 2))
    return {"loss": 1.0 / 3, "accuracy": 0.5}


class _TI:
    dag_id, task_id, run_id, try_number = "nightly", "train", "manual__1", 2

    def xcom_push(self, key: str, value: object) -> None:
        pass


def test_wandb_offline_run_holds_step_metrics_params_delta_version_mlflow_run_and_airflow_identity(
    digits_ref, tmp_path, monkeypatch
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)  # in the environment W&B's process inherits
    operator = TrainModelOperator(
        task_id="train",
        dataset=digits_ref.to_dict(),
        train_fn=steps_train,
        hparams={"save": True, "epochs": 3, "api_token": SECRET},
        extra_tracking={"wandb": {"project": "digits", "mode": "offline"}},
    )
    result = TrainResult.from_dict(operator.execute({"ti": _TI(), "logical_date": None}))  # type: ignore[arg-type]
    records = _records(result.run_dir)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["run_id"] == result.run_id and run["project"] == "digits"
    config = run["config"]["update"]
    assert config["epochs"] == 3 and config["api_token"] == "***"
    dltrain = config["dltrain"]
    assert dltrain["mlflow.run_id"] == result.run_id
    assert dltrain["airflow.dag_id"] == "nightly" and dltrain["airflow.try_number"] == "2"
    assert dltrain["airflow.task_id"] == "train" and dltrain["airflow.run_id"] == "manual__1"
    history = [r["history"] for r in records if r["type"] == "history"]
    logged = [(h["step"].get("num", 0), h["item"]["loss"]) for h in history if "loss" in h["item"]]
    assert logged == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]  # every step rank 0 logged
    (artifact,) = [r["artifact"] for r in records if r["type"] == "artifact"]
    metadata = json.loads(artifact["metadata"])
    assert metadata["table_uri"] == digits_ref.uri and metadata["version"] == digits_ref.version
    assert artifact["type"] == "dataset" and f"v{digits_ref.version}" in artifact["aliases"]
    (entry,) = artifact["manifest"]["contents"]  # a reference to the version's commit, no data copied
    assert entry["ref"] == f"file://{digits_ref.uri}/_delta_log/{digits_ref.version:020d}.json"
    summary: dict[str, Any] = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update", {}))
    assert summary["mlflow.model_uri"] == result.model_uri
    assert summary["accuracy"] == 0.5  # final metrics, logged or only returned
    assert [r["exit"].get("exit_code", 0) for r in records if r["type"] == "exit"] == [0]
    for path in glob.glob(os.path.join(result.run_dir, "wandb", "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                assert SECRET.encode() not in handle.read(), path


@pytest.mark.parametrize("required", [False, True])
def test_a_wandb_outage_fails_training_only_when_wandb_is_required(digits_ref, monkeypatch, required):
    import wandb

    def down(**kwargs: Any) -> Any:  # the W&B server is a boundary the tests cannot reach
        raise wandb.errors.CommError("W&B is unreachable")

    monkeypatch.setattr(wandb, "init", down)
    spec = {"wandb": {"project": "digits", "mode": "online", "required": required}}
    if not required:
        result = run_training(steps_train, digits_ref, {}, tracking=False, extra_tracking=spec)
        assert result.metrics["loss"] == pytest.approx(1 / 3)
        return
    with pytest.raises(
        TrainingFailedError, match=r"ExtraTrackingError: W&B init failed for project 'digits'"
    ):
        run_training(steps_train, digits_ref, {}, tracking=False, extra_tracking=spec)


def test_extra_tracking_is_checked_before_anything_runs(digits_ref):
    with pytest.raises(InvalidSpecError, match=r"unknown targets \['neptune'\]"):
        run_training(steps_train, digits_ref, tracking=False, extra_tracking={"neptune": {}})
    with pytest.raises(InvalidSpecError, match="mode"):
        run_training(
            steps_train, digits_ref, tracking=False, extra_tracking={"wandb": {"project": "p", "mode": "x"}}
        )


def test_the_operator_refuses_a_bad_extra_tracking_when_the_dag_is_parsed(digits_ref):
    kwargs = {"task_id": "t", "dataset": digits_ref.to_dict(), "train_fn": "m:f"}
    with pytest.raises(InvalidSpecError, match=r"unknown keys \['projct'\]"):
        TrainModelOperator(**kwargs, extra_tracking={"wandb": {"projct": "p"}})


# the options each backend needs before a DAG using it parses
NEEDS = {
    "ddp": {},
    "sagemaker": {"staging_uri": "s3://b/s", "role": "arn:aws:iam::123456789012:role/Job"},
    "ec2": {"staging_uri": "s3://b/s"},
    "ray": {"address": "http://ray-head:8265", "staging_uri": "s3://b/s"},
    "kubeflow": {"staging_uri": "s3://b/s", "image": "dltrain/train:local"},
}


@pytest.mark.parametrize("backend", sorted(NEEDS))
def test_every_backend_accepts_wandb_when_the_dag_is_parsed(digits_ref, backend):
    from airflow_provider_dltrain.training.request import TrainingRequest

    wandb = {"wandb": {"project": "p", "mode": "offline"}}
    op = TrainModelOperator(
        task_id="t",
        dataset=digits_ref.to_dict(),
        train_fn="m:f",
        backend=backend,
        backend_options=NEEDS[backend],
        extra_tracking=wandb,
    )
    assert op.extra_tracking == wandb
    assert TrainingRequest("m:f", digits_ref, backend=backend, extra_tracking=wandb).extra_tracking == wandb


def test_a_remote_jobs_rank_0_records_the_wandb_run_its_spec_carries(digits_ref, tmp_path, monkeypatch):
    """The launcher puts the W&B settings and the run's identity into the job spec (JSON, no key);
    rank 0 of the job (``train_entry``, what SageMaker, EC2, Ray and Kubeflow nodes run) records the
    run with them."""
    from types import SimpleNamespace

    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
    from airflow_provider_dltrain.jobs import train_entry
    from airflow_provider_dltrain.lake.scan_plan import resolve
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.remote import _job_wandb
    from airflow_provider_dltrain.training.request import TrainingRequest

    for name in ("RANK", "WORLD_SIZE", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(train_entry.FAILURE_FILE_ENV, str(tmp_path / "failure"))
    request = TrainingRequest(
        "test_wandb_tracking:steps_train",
        digits_ref,
        {"api_token": SECRET},
        backend="kubeflow",
        extra_tracking={"wandb": {"project": "digits", "mode": "offline"}},
    )
    started = SimpleNamespace(
        run_id="remote-run-1",
        experiment_id="7",
        tags={"dltrain.dag_id": "nightly", "dltrain.task_id": "train", "dltrain.try_number": "3"},
    )
    tracking = TrackingConfig(tracking_uri="https://user:pw@mlflow.example.com")
    spec = TrainJobSpec(
        train_fn="test_wandb_tracking:steps_train",
        dataset=digits_ref.to_dict(),
        data_filter=[],
        hparams={"api_token": SECRET},
        seed=0,
        world_size=1,
        data_fingerprint=resolve(digits_ref).fingerprint,
        result_uri=str(tmp_path / "run" / "result.json"),
        wandb=_job_wandb(request, started, tracking),
    )
    text = spec.to_json()
    assert "pw@" not in text  # the W&B spec holds no credentials
    assert train_entry.run(TrainJobSpec.from_json(text)) == 0  # what the job reads
    records = _records(str(tmp_path / "run"))
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["run_id"] == "remote-run-1" and run["project"] == "digits"
    config = run["config"]["update"]
    assert config["api_token"] == "***"
    dltrain = config["dltrain"]
    assert dltrain["mlflow.run_id"] == "remote-run-1" and dltrain["airflow.try_number"] == "3"
    assert dltrain["mlflow.tracking_uri"] == "https://mlflow.example.com"
    history = [r["history"] for r in records if r["type"] == "history"]
    assert [h["item"]["loss"] for h in history if "loss" in h["item"]] == [1.0, 0.5, pytest.approx(1 / 3)]
