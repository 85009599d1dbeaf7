"""``distribution="mpi"`` on the fake's SageMaker: the Horovod ranks under ``mpirun``.

Apart from test_sagemaker_training.py (whose fixtures it uses) because it needs Horovod, which
``make test`` builds beside the suite: a file with a ``horovod`` test runs after the others and waits
for that build (tests/support/horovod.py), and the rest of the SageMaker tests need not wait.
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import aws_client
from test_sagemaker_training import SECRET_TOKEN, _context, _jobs, _operator, sm, sm_lake  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.usefixtures("horovod")]


def test_an_mpi_job_trains_two_horovod_ranks_under_mpirun_like_the_torchrun_job(sm, caplog):  # noqa: F811
    """distribution="mpi": the container's own entry point runs a real ``mpirun`` (one host, 2 slots),
    each rank trains through Horovod's MPI controller; gradients are averaged as under torchrun."""
    from mlflow import MlflowClient

    hparams = {"epochs": 1, "batch_size": 16, "seed": 5}
    results = {}
    for distribution in ("torchrun", "mpi"):
        op = _operator(sm, f"train_{distribution}", hparams=hparams, distribution=distribution)
        results[distribution] = op.execute(_context(op.task_id))
    client = MlflowClient(tracking_uri=sm["mlflow_uri"])
    runs = {d: client.get_run(r["run_id"]) for d, r in results.items()}
    assert runs["mpi"].info.status == "FINISHED" and results["mpi"]["world_size"] == 2
    assert runs["mpi"].data.tags["dltrain.collectives"] == "horovod/mpi"
    assert runs["torchrun"].data.tags["dltrain.collectives"] == "torch.distributed/gloo"
    assert results["mpi"]["model_uri"].startswith("models:/")
    job = aws_client("sagemaker", sm["endpoint"]).describe_training_job(
        TrainingJobName=_jobs(sm, "train-mpi")[-1]["TrainingJobName"]
    )
    assert job["TrainingJobStatus"] == "Completed"
    assert job["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--distribution", "mpi"]
    # same rows, same global batches, averaged gradients: the first epoch's loss agrees
    losses = {d: r.data.metrics["train_loss"] for d, r in runs.items()}
    assert losses["mpi"] == pytest.approx(losses["torchrun"], rel=1e-3)
    assert SECRET_TOKEN not in json.dumps(results) + caplog.text + json.dumps(dict(runs["mpi"].data.params))
