"""TrainModelOperator(backend="sagemaker"): the CreateTrainingJob request, and jobs that really train.

Airflow operator → boto3 → the fake AWS (moto) → a local "container" running the SageMaker SDK's own
torchrun driver (for the MPI distribution: the job's own entry point under a real ``mpirun``) → our
job script on 2 ranks → Delta on moto S3 read at the pinned version → MLflow on SQLite → the rank 0
report back to the operator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from unittest import mock

import pytest
from engine_helpers import aws_client, aws_connection

from airflow_provider_dltrain.testing.fake_aws_process import credentials_for

pytestmark = pytest.mark.slow

CONN, MLFLOW_CONN = "aws_sm", "mlflow_sm"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
SECRET_TOKEN = "tok-9f3b7c1e-never-shown"
DAYS = ("2026-11-24", "2026-11-25")


@pytest.fixture(scope="module")
def sm_lake(fake_aws_endpoint):
    """A tiny digits table (2 partitions, ~225 rows) on the fake's S3."""
    from sm_train_fns import digits_partition

    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.lake.storage import s3_storage_options

    bucket = f"sm-{uuid.uuid4().hex[:10]}"
    aws_client("s3", fake_aws_endpoint).create_bucket(Bucket=bucket)
    key, secret = credentials_for(fake_aws_endpoint)
    storage = s3_storage_options(
        access_key=key, secret_key=secret, region="us-east-1", endpoint_url=fake_aws_endpoint
    )
    ref = None
    for i, day in enumerate(DAYS):
        ref = lake.overwrite_partition(
            f"s3://{bucket}/lake/digits", digits_partition(i, 16), {"ds": day}, storage_options=storage
        )
    return {"bucket": bucket, "ref": ref.to_dict(), "storage": storage}


@pytest.fixture
def sm(aws_leak_check, sm_lake, monkeypatch, tmp_path):
    endpoint = aws_leak_check
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", aws_connection(endpoint))
    db = tmp_path / "mlflow.db"
    mlflow_conn = {"conn_type": "mlflow", "host": f"sqlite:///{db}", "password": SECRET_TOKEN}
    monkeypatch.setenv(f"AIRFLOW_CONN_{MLFLOW_CONN.upper()}", json.dumps(mlflow_conn))
    secret = f"dltrain/mlflow-{uuid.uuid4().hex[:6]}"
    secrets = aws_client("secretsmanager", endpoint)
    secrets.create_secret(Name=secret, SecretString=json.dumps({"MLFLOW_TRACKING_TOKEN": SECRET_TOKEN}))
    options = {
        "staging_uri": f"s3://{sm_lake['bucket']}/staging",
        "role": ROLE,
        "image_uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311",
        "instance_type": "ml.m5.xlarge",
        "processes_per_host": 2,
        "tracking_secret": secret,
    }
    yield {
        **sm_lake,
        "endpoint": endpoint,
        "options": options,
        "mlflow_uri": f"sqlite:///{db}",
        "secret": secret,
    }
    secrets.delete_secret(SecretId=secret, ForceDeleteWithoutRecovery=True)


def _operator(sm, task_id, train_fn="sm_train_fns:demo_train", hparams=None, deferrable=False, **options):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    return TrainModelOperator(
        task_id=task_id,
        dataset=sm["ref"],
        train_fn=train_fn,
        hparams=hparams or {"epochs": 2, "batch_size": 16, "seed": 3},
        data_filter=[["ds", "<=", DAYS[-1]]],
        backend="sagemaker",
        backend_options={**sm["options"], **options},
        mlflow_conn_id=MLFLOW_CONN,
        aws_conn_id=CONN,
        poll_interval=0.5,
        deferrable=deferrable,
    )


def _context(task_id, try_number=1, run_id=None):
    ti = mock.MagicMock(
        dag_id="sm_dag",
        run_id=run_id or f"manual__{uuid.uuid4().hex[:8]}",
        task_id=task_id,
        try_number=try_number,
        map_index=-1,
    )
    return {"ti": ti, "dag_run": mock.MagicMock(dag_id="sm_dag"), "run_id": ti.run_id, "logical_date": None}


def _run(sm, run_id):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=sm["mlflow_uri"]).get_run(run_id)


def _jobs(sm, contains):
    client = aws_client("sagemaker", sm["endpoint"])
    return [j for j in client.list_training_jobs(NameContains=contains)["TrainingJobSummaries"]]


def test_the_create_training_job_request_is_exactly_what_sagemaker_needs(sm):
    from airflow_provider_dltrain.engines.run_spec import RunIdentity
    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec
    from airflow_provider_dltrain.hooks.engines import EngineHook

    engine = EngineHook(CONN).get_engine("sagemaker", {**sm["options"], "use_spot": True, "max_run_s": 3600})
    engine.set_job_credentials({"MLFLOW_TRACKING_TOKEN": SECRET_TOKEN})
    identity = RunIdentity(dag_id="d", run_id="r1", task_id="train", try_number=2)
    spec = TrainJobSpec(
        train_fn="sm_train_fns:demo_train",
        dataset=sm["ref"],
        data_filter=[],
        hparams={"epochs": 1},
        seed=0,
        world_size=2,
        data_fingerprint="f" * 64,
        identity=identity,
        tracking_uri=sm["mlflow_uri"],
    )
    staged = engine.stage(spec)
    request = engine.request(staged)
    root = sm["options"]["staging_uri"]
    code_channel = request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
    assert code_channel.startswith(f"{root}/code/sagemaker-") and code_channel.endswith("/")
    assert request == {
        "TrainingJobName": identity.job_name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": sm["options"]["image_uri"],
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/sagemaker_launch.py"],
            "ContainerArguments": [
                "--distribution",
                "torchrun",
                "--processes-per-host",
                "2",
                "--entry",
                "/opt/ml/input/data/code/job_script.py",
            ],
        },
        "HyperParameters": {"spec": staged.spec_uri, "code": staged.code_uri},
        "InputDataConfig": [
            {
                "ChannelName": "code",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": code_channel,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
                "InputMode": "File",
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"{root}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200},
        "EnableManagedSpotTraining": True,
        "CheckpointConfig": {"S3Uri": staged.spec.checkpoint_uri, "LocalPath": "/opt/ml/checkpoints"},
        "Environment": {
            "DLTRAIN_MLFLOW_SECRET_ID": sm["secret"],
            "DLTRAIN_CHECKPOINT_DIR": "/opt/ml/checkpoints",
            "DLTRAIN_ENGINE": "sagemaker",
        },
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(identity.tags().items())],
    }
    assert staged.spec.checkpoint_uri.startswith(f"{root}/runs/{identity.task_key}/checkpoints/")
    assert SECRET_TOKEN not in json.dumps(request) + staged.spec.to_json()
    # without a secret the connection's credentials go to the job's environment, never elsewhere
    engine.options = dataclasses.replace(engine.options, tracking_secret=None)
    bare = engine.request(staged)
    assert bare["Environment"]["MLFLOW_TRACKING_TOKEN"] == SECRET_TOKEN
    assert SECRET_TOKEN not in json.dumps(bare["HyperParameters"]) + staged.spec.to_json()


def test_mpi_distribution_renders_mpirun_for_every_rank_of_every_host(sm):
    from airflow_provider_dltrain.engines import sagemaker_launch as launch
    from airflow_provider_dltrain.hooks.engines import EngineHook

    engine = EngineHook(CONN).get_engine(
        "sagemaker",
        {**sm["options"], "distribution": "mpi", "instance_count": 2, "mpi_options": ["-x", "NCCL_DEBUG"]},
    )
    assert engine.world_size == 4
    assert engine.container_arguments() == [
        "--distribution",
        "mpi",
        "--processes-per-host",
        "2",
        "--entry",
        "/opt/ml/input/data/code/job_script.py",
        "--mpi-option",
        "-x",
        "--mpi-option",
        "NCCL_DEBUG",
    ]
    args = ["--spec", "s3://b/spec.json", "--code", "s3://b/c.zip"]
    mpi = launch.mpi_command(
        ["algo-1", "algo-2"], 2, "job_script.py", args, ["-x", "NCCL_DEBUG"], python="py"
    )
    assert mpi[:6] == ["mpirun", "--allow-run-as-root", "--host", "algo-1:2,algo-2:2", "-np", "4"]
    assert mpi[-8:] == ["-x", "NCCL_DEBUG", "py", "job_script.py", *args]
    torchrun = launch.torchrun_command(["algo-1", "algo-2"], "algo-2", 2, "job_script.py", args, python="py")
    assert torchrun == [
        "py",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=2",
        "--master_addr=algo-1",
        "--master_port=29500",
        "--node_rank=1",
        "job_script.py",
        *args,
    ]


def test_a_deferred_sagemaker_job_trains_two_ranks_logs_to_mlflow_and_leaks_no_secret(sm, caplog):
    from airflow.sdk.exceptions import TaskDeferred

    op = _operator(sm, "train_deferred", deferrable=True)
    context = _context(op.task_id)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    kwargs = trigger.serialize()[1]

    async def first_event():
        return await anext(trigger.run())

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=240))
    result = _operator(sm, "train_deferred").execute_complete(context, event.payload)

    assert result["world_size"] == 2 and result["model_uri"].startswith("models:/")
    assert result["dataset"]["version"] == sm["ref"]["version"]
    run = _run(sm, result["run_id"])
    assert run.info.status == "FINISHED"
    assert {"train_loss", "val_loss", "val_accuracy"} <= set(run.data.metrics)
    assert run.data.tags["dltrain.backend"] == "sagemaker" and run.data.tags["dltrain.world_size"] == "2"
    job = aws_client("sagemaker", sm["endpoint"]).describe_training_job(
        TrainingJobName=event.payload["handle"]["ids"]["job_name"]
    )
    assert job["TrainingJobStatus"] == "Completed"
    pushed = json.dumps([c.kwargs for c in context["ti"].xcom_push.call_args_list], default=str)
    everything = pushed + json.dumps(kwargs) + json.dumps(event.payload) + json.dumps(result) + caplog.text
    everything += (
        json.dumps(job, default=str) + json.dumps(dict(run.data.params)) + json.dumps(dict(run.data.tags))
    )
    assert SECRET_TOKEN not in everything


def test_a_failing_job_fails_the_task_with_its_failure_reason_and_ends_the_mlflow_run_failed(sm):
    from airflow_provider_dltrain.exceptions import TrainingFailedError

    op = _operator(sm, "train_fails", train_fn="sm_train_fns:failing_train")
    context = _context(op.task_id)
    with pytest.raises(TrainingFailedError) as failed:
        op.execute(context)
    message = str(failed.value)
    assert "ended Failed: AlgorithmError: rank 1: ValueError: boom on rank 1" in message
    assert "training failed on rank 1 of 2" in message and "Traceback" in message
    run_id = json.loads(_jobs_spec(sm, "train-fails"))["mlflow_run_id"]
    run = _run(sm, run_id)
    assert run.info.status == "FAILED" and "boom on rank 1" in run.data.tags["dltrain.failure"]


def _jobs_spec(sm, contains):
    s3 = aws_client("s3", sm["endpoint"])
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=sm["bucket"], Prefix="staging/runs/")["Contents"]]
    job = _jobs(sm, contains)[-1]
    hp = aws_client("sagemaker", sm["endpoint"]).describe_training_job(TrainingJobName=job["TrainingJobName"])
    key = hp["HyperParameters"]["spec"].split("/", 3)[3]
    assert key in keys
    return s3.get_object(Bucket=sm["bucket"], Key=key)["Body"].read()


def _wait_in_progress(sm, contains, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = _jobs(sm, contains)
        if jobs and jobs[-1]["TrainingJobStatus"] == "InProgress":
            return jobs[-1]["TrainingJobName"]
        time.sleep(0.3)
    raise AssertionError(f"no InProgress job named *{contains}*: {_jobs(sm, contains)}")


def test_killing_the_task_stops_the_job_and_ends_the_mlflow_run_failed(sm):
    op = _operator(sm, "train_killed", train_fn="sm_train_fns:slow_train", hparams={"sleep_s": 600})
    errors = []
    thread = threading.Thread(target=lambda: _capture(errors, op.execute, _context(op.task_id)), daemon=True)
    thread.start()
    name = _wait_in_progress(sm, "train-killed")
    op.on_kill()
    thread.join(timeout=60)
    client = aws_client("sagemaker", sm["endpoint"])
    assert client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopped"
    assert errors, "the task should fail once its job was stopped"
    run = _run(sm, json.loads(_jobs_spec(sm, "train-killed"))["mlflow_run_id"])
    assert run.info.status == "FAILED"


def test_the_reaper_finds_a_training_job_by_its_tags_and_stops_it_once_its_task_is_gone(sm):
    """A worker that died without on_kill leaves its SageMaker job training: the reaper lists it (the
    adapter's own listing, by the job's identity tags) and stops it when its task no longer runs."""
    from airflow_provider_dltrain.engines.reaper import find_resources, reap

    op = _operator(sm, "train_orphan", train_fn="sm_train_fns:slow_train", hparams={"sleep_s": 600})
    errors = []
    thread = threading.Thread(target=lambda: _capture(errors, op.execute, _context(op.task_id)), daemon=True)
    thread.start()
    name = _wait_in_progress(sm, "train-orphan")

    def clients(service):
        return aws_client(service, sm["endpoint"])

    (found,) = [r for r in find_resources(clients) if r.kind == "sagemaker_training_job"]
    assert found.id == name and found.state == "InProgress" and found.identity.task_id == "train_orphan"
    kept = reap(clients, lambda identity: identity.task_id == "train_orphan")
    assert [(o.resource.id, o.action) for o in kept if o.resource.kind == found.kind] == [(name, "kept")]
    dry = reap(clients, lambda identity: False, dry_run=True)  # the task is gone: listed, left running
    assert [(o.resource.id, o.action) for o in dry if o.resource.kind == found.kind] == [(name, "would stop")]
    assert (
        clients("sagemaker").describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress"
    )
    reaped = reap(clients, lambda identity: False)
    assert [(o.resource.id, o.action) for o in reaped if o.resource.kind == found.kind] == [(name, "stopped")]
    thread.join(timeout=60)
    assert clients("sagemaker").describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopped"
    assert errors, "the task should fail once its job was stopped"


def _capture(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as err:
        errors.append(err)


def test_a_retry_after_a_worker_crash_reattaches_to_the_running_job(sm):
    from airflow_provider_dltrain.operators.engine_run import EngineRun

    class WorkerDied(BaseException):
        pass

    def crash(self, engine, handle, event):
        raise WorkerDied  # the worker vanished mid-wait: nothing cancels the job

    hparams = {"epochs": 2, "batch_size": 8, "step_sleep": 0.02}
    run_id = f"manual__{uuid.uuid4().hex[:8]}"
    first = _operator(sm, "train_retry", train_fn="sm_train_fns:resumable_train", hparams=hparams)
    with mock.patch.object(EngineRun, "_finish", crash), pytest.raises(WorkerDied):
        first.execute(_context(first.task_id, 1, run_id))
    second = _operator(sm, "train_retry", train_fn="sm_train_fns:resumable_train", hparams=hparams)
    result = second.execute(_context(second.task_id, 2, run_id))
    jobs = _jobs(sm, "train-retry")
    assert len(jobs) == 1 and jobs[0]["TrainingJobName"].endswith("-t1"), jobs
    assert jobs[0]["TrainingJobStatus"] == "Completed"
    assert _run(sm, result["run_id"]).info.status == "FINISHED"


def test_a_spot_job_interrupted_mid_epoch_resumes_to_the_same_weights_as_an_uninterrupted_one(sm):
    hparams = {"epochs": 3, "batch_size": 8, "step_sleep": 0.05, "seed": 11}
    results = {}
    for task, interrupt in (("spot_plain", "0"), ("spot_interrupted", "1")):
        op = _operator(
            sm,
            task,
            train_fn="sm_train_fns:resumable_train",
            hparams=hparams,
            use_spot=True,
            max_run_s=600,
            environment={"FAKE_SPOT_INTERRUPT": interrupt},
        )
        results[task] = op.execute(_context(op.task_id))
    client = aws_client("sagemaker", sm["endpoint"])
    job = client.describe_training_job(TrainingJobName=_jobs(sm, "spot-interrupted")[-1]["TrainingJobName"])
    secondary = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert "Interrupted" in secondary and job["TrainingJobStatus"] == "Completed"
    assert (
        job["EnableManagedSpotTraining"] is True
        and job["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    )
    plain, resumed = results["spot_plain"], results["spot_interrupted"]
    assert resumed["metrics"]["resumed_from_epoch"] >= 1.0 and plain["metrics"]["resumed_from_epoch"] == 0.0
    assert resumed["weights_sha256"] == plain["weights_sha256"]


def test_killing_a_deferred_task_stops_the_job_and_ends_the_mlflow_run_from_the_triggerer(sm):
    """The worker is gone while the task defers: the trigger's on_kill stops the job and ends the run."""
    from airflow.sdk.exceptions import TaskDeferred

    op = _operator(
        sm,
        "train_deferred_killed",
        train_fn="sm_train_fns:slow_train",
        hparams={"sleep_s": 600},
        deferrable=True,
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(op.task_id))
    trigger = deferred.value.trigger
    kwargs = trigger.serialize()[1]
    run_id = json.loads(_jobs_spec(sm, "train-deferred-killed"))["mlflow_run_id"]
    # the connection, never the run or a credential: the launcher finds the run in the job's spec
    assert kwargs["mlflow_conn_id"] == MLFLOW_CONN and kwargs["mlflow_run_id"] is None
    assert SECRET_TOKEN not in json.dumps(kwargs)
    name = _wait_in_progress(sm, "train-deferred-killed")
    assert _run(sm, run_id).info.status == "RUNNING"
    asyncio.run(type(trigger)(**kwargs).on_kill())  # a triggerer rebuilds the trigger from its kwargs
    client = aws_client("sagemaker", sm["endpoint"])
    assert client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] in ("Stopping", "Stopped")
    run = _run(sm, run_id)
    assert run.info.status == "FAILED" and "killed" in run.data.tags["dltrain.failure"]


_NOTEBOOK = """
import json, sys
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.runner import run_training

args = json.loads(sys.argv[1])
results = {}
for backend, options in args["backends"].items():
    result = run_training(
        "sm_train_fns:demo_train",
        args["ref"],
        {"epochs": 1, "batch_size": 16, "seed": 3},
        backend=backend,
        backend_options=options,
        data_filter=[["ds", "<=", args["day"]]],
        tracking=TrackingConfig(tracking_uri=args["mlflow_uri"]),
        experiment_name="notebook",
        storage_options=args["storage"],
        poll_interval=0.5,
    )
    results[backend] = result.to_dict()
airflow = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
print("RESULT " + json.dumps({"results": results, "airflow_modules": airflow}, default=str))
"""


def test_run_training_trains_on_sagemaker_and_ec2_from_a_process_without_airflow(sm, tmp_path):
    """A notebook's call: ``run_training(backend="sagemaker" | "ec2")`` opens the MLflow run, runs the
    job, tears it down and returns the TrainResult, and nothing imports Airflow."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mlflow import MlflowClient

    ec2 = {
        "staging_uri": sm["options"]["staging_uri"],
        "instance_count": 2,
        "image_id": "ami-0abcdef1234567890",
    }
    args = {
        "backends": {"sagemaker": sm["options"], "ec2": {**ec2, "tracking_secret": sm["secret"]}},
        "ref": sm["ref"],
        "day": DAYS[-1],
        "mlflow_uri": sm["mlflow_uri"],
        "storage": sm["storage"],
    }
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": sm["endpoint"],
        "AWS_ACCESS_KEY_ID": credentials_for(sm["endpoint"])[0],
        "AWS_SECRET_ACCESS_KEY": credentials_for(sm["endpoint"])[1],
        "AWS_DEFAULT_REGION": "us-east-1",
        "MLFLOW_TRACKING_TOKEN": SECRET_TOKEN,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _NOTEBOOK, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    assert out["airflow_modules"] == []
    client = MlflowClient(tracking_uri=sm["mlflow_uri"])
    for backend, result in out["results"].items():
        run = client.get_run(result["run_id"])
        assert run.info.status == "FINISHED", backend
        assert run.data.tags["dltrain.backend"] == backend and run.data.tags["dltrain.world_size"] == "2"
        assert result["world_size"] == 2 and result["model_uri"].startswith("models:/")
        assert result["dataset"]["version"] == sm["ref"]["version"] and "train_loss" in result["metrics"]
        assert len(result["weights_sha256"]) == 64 and result["run_dir"]
    assert SECRET_TOKEN not in done.stdout + done.stderr
    # aws_leak_check: the SageMaker job ended, both instances are terminated
