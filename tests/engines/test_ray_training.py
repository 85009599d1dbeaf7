"""backend="ray": Ray jobs on a real 2-node Ray cluster started on 127.0.0.1 by the test.

Airflow operator (or ``run_training`` without Airflow) → Ray's Jobs API → the job's driver on the
cluster → Ray Train's ``TorchTrainer`` with one worker per node (``STRICT_SPREAD``: both nodes or
nothing) → our rank code reading the pinned Delta version → MLflow on SQLite → rank 0's report
back to the launcher. At the end every process of the cluster, its jobs and workers, is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from unittest import mock

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("ray.train")

DAYS = ("2026-11-24", "2026-11-25")
HPARAMS = {"epochs": 2, "batch_size": 16, "seed": 3}
TRAIN_PROCESS_NAMES = ("ray::RayTrainWorker", "ray::TrainController")


_CLUSTER_PIDS: list[int] = []


@pytest.fixture(scope="module")
def ray_cluster_env(fake_aws_server):
    """The nodes' variables: the fake AWS's, so Ray workers reach its S3 (as the docs' conftest does).
    Torn down after the plugin's ``ray_cluster``, so it checks what that left."""
    import psutil

    yield fake_aws_server.env
    left = []
    for pid in _CLUSTER_PIDS:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert not left, f"processes of the Ray cluster outlived its fixture: {left}"


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """The plugin's 2-node cluster; its client proxy (re-parented to init) and the nodes' variables checked."""
    procs = ray_cluster.processes()
    commands = {p.pid: " ".join(p.cmdline()) for p in procs}
    assert any("ray.util.client.server" in c for c in commands.values()), commands
    (raylet, *_) = [p for p in procs if p.name() == "raylet"]
    assert raylet.environ()["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")  # ray_cluster_env's
    _CLUSTER_PIDS.extend(commands)
    yield ray_cluster


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    from sm_train_fns import digits_partition

    from airflow_provider_dltrain import lake

    root = tmp_path_factory.mktemp("ray-lake")
    ref = None
    for i, day in enumerate(DAYS):
        ref = lake.overwrite_partition(str(root / "digits"), digits_partition(i, 16), {"ds": day})
    return {"ref": ref.to_dict(), "root": root}


@pytest.fixture
def ray_env(cluster, lake, tmp_path, monkeypatch):
    for name, value in cluster.env.items():  # token authentication: what the Jobs API clients need
        monkeypatch.setenv(name, value)
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_RAY", json.dumps({"conn_type": "mlflow", "host": f"sqlite:///{db}"})
    )
    options = {
        "address": cluster.address,
        "staging_uri": str(tmp_path / "staging"),
        "num_workers": 2,
        "placement_strategy": "STRICT_SPREAD",
    }
    yield {**lake, "cluster": cluster, "options": options, "mlflow_uri": f"sqlite:///{db}", "tmp": tmp_path}
    left = _train_processes(cluster)
    assert not left, f"Ray Train processes left after the test: {left}"


def _train_processes(cluster, wait_s: float = 20.0) -> list[str]:
    """Ray Train controller and worker processes of the cluster still alive (a job's end frees them
    within seconds: Ray turns its workers back into idle ones)."""
    deadline = time.monotonic() + wait_s
    while True:
        names = []
        for proc in cluster.processes():
            try:
                names.append(" ".join(proc.cmdline())[:80])
            except Exception:
                continue
        busy = [n for n in names if n.startswith(TRAIN_PROCESS_NAMES)]
        if not busy or time.monotonic() > deadline:
            return busy
        time.sleep(0.5)


def _jobs(env, contains):
    from ray.job_submission import JobSubmissionClient

    from airflow_provider_dltrain.engines.ray_jobs import ray_auth_headers

    client = JobSubmissionClient(env["cluster"].address, headers=ray_auth_headers())
    return [j for j in client.list_jobs() if contains in (j.submission_id or "")]


def _wait_running(env, contains, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [j for j in _jobs(env, contains) if str(j.status) == "RUNNING"]
        if jobs:
            return jobs[-1].submission_id
        time.sleep(0.3)
    raise AssertionError(f"no RUNNING Ray job named *{contains}*: {_jobs(env, contains)}")


def _operator(
    env,
    task_id,
    train_fn="sm_train_fns:demo_train",
    hparams=None,
    deferrable=False,
    aws_conn_id=None,
    **options,
):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    return TrainModelOperator(
        task_id=task_id,
        dataset=env["ref"],
        train_fn=train_fn,
        hparams=hparams or HPARAMS,
        data_filter=[["ds", "<=", DAYS[-1]]],
        backend="ray",
        backend_options={**env["options"], **options},
        mlflow_conn_id="mlflow_ray",
        aws_conn_id=aws_conn_id,
        poll_interval=0.5,
        deferrable=deferrable,
    )


def _context(task_id, try_number=1, run_id=None):
    ti = mock.MagicMock(
        dag_id="ray_dag",
        run_id=run_id or f"manual__{uuid.uuid4().hex[:8]}",
        task_id=task_id,
        try_number=try_number,
        map_index=-1,
    )
    return {"ti": ti, "dag_run": mock.MagicMock(dag_id="ray_dag"), "run_id": ti.run_id, "logical_date": None}


def _handle_of(sid):
    from airflow_provider_dltrain.engines import JobHandle

    return JobHandle("ray", {"job_name": sid}, "")


def _run(env, run_id):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=env["mlflow_uri"]).get_run(run_id)


def test_the_jobs_api_refuses_a_process_without_the_clusters_token_file(cluster):
    """A second user of the machine reaches 127.0.0.1 but cannot read the 0600 token: it runs nothing."""
    import urllib.error
    import urllib.request

    assert cluster.token_file.stat().st_mode & 0o777 == 0o600
    assert cluster.env["RAY_AUTH_MODE"] == "token"
    submit = urllib.request.Request(
        f"{cluster.address}/api/jobs/",
        data=json.dumps({"entrypoint": "touch /tmp/dltrain-ray-intruder"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(submit, timeout=30)
    assert info.value.code == 401


def test_a_deferred_task_trains_on_two_nodes_bit_identical_to_local_ddp(ray_env):
    """Two Ray Train workers, one per node, through the operator's deferral; the weights equal those
    of the same job under the local ``ddp`` backend (same content, code, hparams, seed, world size)."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_dltrain.operators.engine_run import XCOM_JOB
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.runner import run_training

    op = _operator(ray_env, "train_deferred", deferrable=True)
    context = _context(op.task_id)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    kwargs = deferred.value.trigger.serialize()[1]
    trigger = type(deferred.value.trigger)(**kwargs)  # a triggerer rebuilds the trigger from its kwargs

    async def first_event():
        return await anext(trigger.run())

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=240))
    result = _operator(ray_env, "train_deferred").execute_complete(context, event.payload)

    assert result["world_size"] == 2 and result["model_uri"].startswith("models:/")
    assert result["dataset"]["version"] == ray_env["ref"]["version"]
    run = _run(ray_env, result["run_id"])
    assert run.info.status == "FINISHED" and {"train_loss", "val_loss", "val_accuracy"} <= set(
        run.data.metrics
    )
    assert run.data.tags["dltrain.backend"] == "ray" and run.data.tags["dltrain.world_size"] == "2"
    (job,) = _jobs(ray_env, event.payload["handle"]["ids"]["job_name"])
    assert str(job.status) == "SUCCEEDED" and job.metadata["dltrain:task_id"] == "train_deferred"
    pushed = {c.kwargs["key"]: c.kwargs["value"] for c in context["ti"].xcom_push.call_args_list}
    assert pushed[XCOM_JOB]["console_url"] == f"{ray_env['cluster'].address}/#/jobs/{job.submission_id}"

    local = run_training(
        "sm_train_fns:demo_train",
        ray_env["ref"],
        HPARAMS,
        backend="ddp",
        backend_options={"num_processes": 2},
        data_filter=[["ds", "<=", DAYS[-1]]],
        tracking=TrackingConfig(tracking_uri=ray_env["mlflow_uri"]),
    )
    assert result["weights_sha256"] == local.weights_sha256
    assert result["metrics"] == local.metrics


_NOTEBOOK = """
import json, logging, sys
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.runner import run_training

logging.basicConfig(level=logging.INFO)
args = json.loads(sys.argv[1])
result = run_training(
    "sm_train_fns:resumable_train",
    args["ref"],
    {"epochs": 2, "batch_size": 8, "step_sleep": args["step_sleep"], "seed": 3},
    backend="ray",
    backend_options=args["options"],
    data_filter=[["ds", "<=", args["day"]]],
    tracking=TrackingConfig(tracking_uri=args["mlflow_uri"]),
    experiment_name="notebook",
    run_key=args["run_key"],
    poll_interval=0.5,
)
airflow = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
print("RESULT " + json.dumps({"result": result.to_dict(), "airflow_modules": airflow}, default=str))
"""


def _notebook(env, step_sleep):
    args = {
        "ref": env["ref"],
        "options": env["options"],
        "day": DAYS[-1],
        "mlflow_uri": env["mlflow_uri"],
        "run_key": "nightly-digits",
        "step_sleep": step_sleep,
    }
    pythonpath = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    return subprocess.Popen(
        [sys.executable, "-c", _NOTEBOOK, json.dumps(args)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=env["tmp"],
    )


def test_run_training_without_airflow_reattaches_after_its_process_dies(ray_env):
    """A notebook's ``run_training(backend="ray", run_key=...)`` is SIGKILLed while its job runs; the
    same call again finds the job by its key, waits for it and returns its TrainResult: one job."""
    killed = _notebook(ray_env, step_sleep=0.2)
    try:
        sid = _wait_running(ray_env, "dltrain-resumable-train-")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
    again = _notebook(ray_env, step_sleep=0.2)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-4000:]
    assert f"re-attaching to ray job {{'job_name': '{sid}'}}" in err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    done = json.loads(line.removeprefix("RESULT "))
    assert done["airflow_modules"] == []
    jobs = _jobs(ray_env, "dltrain-resumable-train-")
    assert [j.submission_id for j in jobs] == [sid] and str(jobs[0].status) == "SUCCEEDED"
    result = done["result"]
    assert result["world_size"] == 2 and result["metrics"]["resumed_from_epoch"] == 0.0
    assert result["weights_sha256"] and _run(ray_env, result["run_id"]).info.status == "FINISHED"


def test_killing_the_task_stops_the_job_and_its_workers_and_ends_the_mlflow_run_failed(ray_env):
    op = _operator(ray_env, "train_killed", train_fn="sm_train_fns:slow_train", hparams={"sleep_s": 600})
    errors: list[BaseException] = []

    def execute():
        try:
            op.execute(_context(op.task_id))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=execute, daemon=True)
    thread.start()
    sid = _wait_running(ray_env, "dltrain-train-killed-")
    deadline = time.monotonic() + 90
    while not _train_processes(ray_env["cluster"], wait_s=0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _train_processes(ray_env["cluster"], wait_s=0), "the workers never started"
    op.on_kill()
    thread.join(timeout=60)
    (job,) = _jobs(ray_env, sid)
    assert str(job.status) == "STOPPED"
    # the same try submitting under its name again (a cleared task keeping its try): refused, not attached
    from airflow_provider_dltrain.engines import JobFailedError, get_engine
    from airflow_provider_dltrain.engines.base import StagedRun
    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec

    engine = get_engine("ray", lambda service: None, ray_env["options"])
    spec_path = next((ray_env["tmp"] / "staging" / "runs").glob("*/1/spec.json"))
    staged_spec = TrainJobSpec.from_json(spec_path.read_text())
    code = staged_spec.code_uris[0]
    staged = StagedRun(staged_spec, str(spec_path), code, code, staged_spec.result_uri)
    with pytest.raises(JobFailedError, match=f"a Ray job named {sid} exists already \\(STOPPED\\)"):
        engine.submit(staged)
    engine.cancel(engine.find(staged_spec.identity) or _handle_of(sid))  # a finished job: nothing to stop
    assert errors and "was stopped" in str(errors[0]), errors
    spec = json.loads(next((ray_env["tmp"] / "staging" / "runs").glob("*/1/spec.json")).read_text())
    assert _run(ray_env, spec["mlflow_run_id"]).info.status == "FAILED"
    # ray_env's exit: no Ray Train worker or controller is left


def test_a_failing_worker_fails_the_task_with_its_rank_and_reason(ray_env, fake_aws):
    """Staged on the fake AWS's S3: the launcher through the connection ``aws``, the Ray job's driver
    and workers through the variables the cluster's nodes got (``ray_cluster_env``)."""
    from airflow_provider_dltrain.exceptions import TrainingFailedError

    fake_aws.create_bucket("ray-staging")
    staging = f"s3://ray-staging/{uuid.uuid4().hex[:8]}"
    op = _operator(
        ray_env, "train_fails", train_fn="sm_train_fns:failing_train", aws_conn_id="aws", staging_uri=staging
    )
    with pytest.raises(TrainingFailedError) as failed:
        op.execute(_context(op.task_id))
    message = str(failed.value)
    assert "ray job dltrain-train-fails-" in message and "ended FAILED" in message
    assert "training failed on rank 1 of 2: ValueError: boom on rank 1" in message and "Traceback" in message
    s3 = fake_aws.client("s3")
    prefix = staging.removeprefix("s3://ray-staging/")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ray-staging", Prefix=prefix)["Contents"]]
    (spec_key,) = [k for k in keys if k.endswith("/1/spec.json")]
    spec = json.loads(s3.get_object(Bucket="ray-staging", Key=spec_key)["Body"].read())
    run = _run(ray_env, spec["mlflow_run_id"])
    assert run.info.status == "FAILED" and "boom on rank 1" in run.data.tags["dltrain.failure"]
