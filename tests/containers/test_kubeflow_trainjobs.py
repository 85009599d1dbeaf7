"""backend="kubeflow": TrainJobs through the Kubeflow SDK's container backend, in the training image.

Airflow operator (or ``run_training`` without Airflow) → ``kubeflow.trainer.TrainerClient`` with
``ContainerBackendConfig`` → a Docker network and one container per node of the training image →
torchrun → our rank code reading the pinned Delta version → MLflow on SQLite → rank 0's report. The
lake, the staging area and the MLflow store live under the pytest base directory, which every node
mounts at the same path (``container_mounts``). No image is pulled (``IfNotPresent`` on local tags),
no runtime is downloaded (the SDK's default ``torch-distributed``). After each test no container,
network or work directory of a TrainJob is left.
"""

from __future__ import annotations

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

from tests.support.images import ensure_images

pytestmark = [pytest.mark.slow, pytest.mark.containers]
pytest.importorskip("kubeflow.trainer")

DAYS = ("2026-11-24", "2026-11-25")
HPARAMS = {"epochs": 2, "batch_size": 16, "seed": 3}
JOB_LABEL = "trainer.kubeflow.org/trainjob-name"


def _docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def _left() -> list[str]:
    """Containers and networks of dltrain TrainJobs still there, and their work directories."""
    containers = _docker("ps", "-a", "--filter", f"label={JOB_LABEL}", "--format", "{{.Names}}")
    # a TrainJob's network; not a compose deployment of the stack (dltrain-stack-<id>_default) running beside
    networks = [
        n
        for n in _docker("network", "ls", "--format", "{{.Name}}")
        if n.startswith("dltrain-") and not n.startswith("dltrain-stack-")
    ]
    trainer = Path.home() / ".kubeflow" / "trainer"
    dirs = [str(p) for p in (trainer / "containers").glob("dltrain-*")]
    secrets = [str(p) for p in (trainer / "dltrain-secrets").glob("*.env")]  # a TrainJob's MLflow credentials
    return containers + networks + dirs + secrets


@pytest.fixture(scope="module")
def kubeflow_image() -> str:
    """The training image without its ENTRYPOINT (the SageMaker shim): the SDK's container backend
    hands Docker the node's command as arguments of it, where Kubernetes replaces it."""
    train = ensure_images(["train"])["train"]
    tag = f"dltrain/train-kubeflow:{train.rsplit(':', 1)[1]}"
    if not _docker("images", "-q", tag):
        subprocess.run(
            ["docker", "build", "-q", "-t", tag, "-"],
            input=f"FROM {train}\nENTRYPOINT []\n",
            text=True,
            check=True,
            capture_output=True,
        )
    return tag


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    from sm_train_fns import digits_partition

    from airflow_provider_dltrain import lake

    root = tmp_path_factory.mktemp("kubeflow-lake")
    ref = None
    for i, day in enumerate(DAYS):
        ref = lake.overwrite_partition(str(root / "digits"), digits_partition(i, 16), {"ds": day})
    return {"ref": ref.to_dict(), "base": str(tmp_path_factory.getbasetemp())}


@pytest.fixture
def kf_env(kubeflow_image, lake, tmp_path, monkeypatch):
    db = tmp_path / "mlflow.db"
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (./mlruns) under the mounted base directory
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_KF", json.dumps({"conn_type": "mlflow", "host": f"sqlite:///{db}"})
    )
    options = {
        "staging_uri": str(tmp_path / "staging"),
        "image": kubeflow_image,
        "num_nodes": 2,
        "runtime_backend": "container",
        "container_mounts": [lake["base"]],
        # torch's CPU sums depend on the thread count: one per rank, as ddp's ranks (torchrun's rule
        # for several ranks per machine; one rank per node keeps every core otherwise)
        "environment": {"OMP_NUM_THREADS": "1"},
    }
    yield {**lake, "options": options, "mlflow_uri": f"sqlite:///{db}", "tmp": tmp_path}
    left = _left()
    assert not left, f"left after the test: {left}"


def _operator(env, task_id, train_fn="sm_train_fns:demo_train", hparams=None, deferrable=False, **kwargs):
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    return TrainModelOperator(
        task_id=task_id,
        dataset=env["ref"],
        train_fn=train_fn,
        hparams=hparams or HPARAMS,
        data_filter=[["ds", "<=", DAYS[-1]]],
        backend="kubeflow",
        backend_options=env["options"],
        mlflow_conn_id="mlflow_kf",
        aws_conn_id=None,
        poll_interval=0.5,
        deferrable=deferrable,
        **kwargs,
    )


def _context(task_id, try_number=1):
    ti = mock.MagicMock(
        dag_id="kubeflow_dag",
        run_id=f"manual__{uuid.uuid4().hex[:8]}",
        task_id=task_id,
        try_number=try_number,
    )
    ti.map_index = -1
    return {
        "ti": ti,
        "dag_run": mock.MagicMock(dag_id="kubeflow_dag"),
        "run_id": ti.run_id,
        "logical_date": None,
    }


def _run(env, run_id):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=env["mlflow_uri"]).get_run(run_id)


def _node_containers(prefix: str, status: str = "running") -> list[str]:
    return [
        n
        for n in _docker("ps", "-a", "--filter", f"status={status}", "--format", "{{.Names}}")
        if n.startswith(prefix) and "-node-" in n
    ]


def _wait_running(prefix: str, timeout: float = 90.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = _node_containers(prefix)
        if len(running) == 2:
            return running
        time.sleep(0.3)
    raise AssertionError(f"no 2 running node containers named {prefix}*: {_docker('ps', '-a')}")


def test_a_deferred_task_trains_on_two_nodes_bit_identical_to_local_ddp(kf_env):
    """Two nodes through the operator's deferral; the weights equal those of the same job under the
    local ``ddp`` backend (same content, code, hparams, seed, world size); the TrainJob is deleted.
    Once the model is registered, an unchanged re-run skips without creating a TrainJob."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_dltrain.operators.engine_run import XCOM_JOB
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.runner import run_training

    op = _operator(kf_env, "train_deferred", deferrable=True)
    context = _context(op.task_id)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    kwargs = deferred.value.trigger.serialize()[1]
    trigger = type(deferred.value.trigger)(**kwargs)  # a triggerer rebuilds the trigger from its kwargs

    async def first_event():
        return await anext(trigger.run())

    import asyncio

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=300))
    handle = event.payload["handle"]
    assert handle["ids"]["job_name"].startswith("dltrain-train-deferred-") and handle["ids"]["uid"]
    result = _operator(kf_env, "train_deferred").execute_complete(context, event.payload)

    assert result["world_size"] == 2 and result["model_uri"].startswith("models:/")
    run = _run(kf_env, result["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["dltrain.backend"] == "kubeflow"
    pushed = {c.kwargs["key"]: c.kwargs["value"] for c in context["ti"].xcom_push.call_args_list}
    assert pushed[XCOM_JOB]["ids"]["job_name"] == handle["ids"]["job_name"]

    local = run_training(
        "sm_train_fns:demo_train",
        kf_env["ref"],
        HPARAMS,
        backend="ddp",
        backend_options={"num_processes": 2},
        data_filter=[["ds", "<=", DAYS[-1]]],
        tracking=TrackingConfig(tracking_uri=kf_env["mlflow_uri"]),
    )
    assert result["weights_sha256"] == local.weights_sha256
    assert result["metrics"] == local.metrics

    # registered, then the same inputs again: the task skips before any TrainJob is created
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_provider_dltrain.engines.kubeflow import KubeflowEngine
    from airflow_provider_dltrain.registry import GateSpec, register_and_promote

    tracking = TrackingConfig(tracking_uri=kf_env["mlflow_uri"])
    register_and_promote(
        tracking,
        model_name="digits",
        model_uri=result["model_uri"],
        run_id=result["run_id"],
        metrics=result["metrics"],
        gate=GateSpec("val_accuracy", "max"),
    )
    again = _operator(kf_env, "train_again", skip_if_unchanged="digits")
    submit = mock.patch.object(
        KubeflowEngine, "submit", side_effect=AssertionError("a TrainJob was submitted")
    )
    with submit, pytest.raises(AirflowSkipException, match="unchanged since digits v1"):
        again.execute(_context(again.task_id))


def test_a_failing_rank_fails_the_task_with_its_rank_reason_and_node_log(kf_env):
    from airflow_provider_dltrain.exceptions import TrainingFailedError

    op = _operator(kf_env, "train_fails", train_fn="sm_train_fns:failing_train")
    with pytest.raises(TrainingFailedError) as failed:
        op.execute(_context(op.task_id))
    message = str(failed.value)
    assert "kubeflow job dltrain-train-fails-" in message and "ended Failed" in message
    assert "training failed on rank 1 of 2: ValueError: boom on rank 1" in message
    # the failed nodes' logs, in the task's error: the failing rank's last words and the log's tail
    # (which node fails first - rank 1, or rank 0 when its peer vanished under it - is a race)
    assert "dltrain job failed on rank 1: ValueError: boom on rank 1" in message
    assert "\n--- node-" in message and 'raise ValueError("boom on rank 1")' in message
    spec = json.loads(next((kf_env["tmp"] / "staging" / "runs").glob("*/1/spec.json")).read_text())
    assert _run(kf_env, spec["mlflow_run_id"]).info.status == "FAILED"


def test_killing_the_task_deletes_the_trainjob_and_ends_the_mlflow_run_failed(kf_env):
    op = _operator(kf_env, "train_killed", train_fn="sm_train_fns:slow_train", hparams={"sleep_s": 600})
    errors: list[BaseException] = []

    def execute():
        try:
            op.execute(_context(op.task_id))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=execute, daemon=True)
    thread.start()
    _wait_running("dltrain-train-killed-")
    op.on_kill()
    thread.join(timeout=60)
    assert not thread.is_alive() and errors, errors
    assert not _left()
    spec = json.loads(next((kf_env["tmp"] / "staging" / "runs").glob("*/1/spec.json")).read_text())
    assert _run(kf_env, spec["mlflow_run_id"]).info.status == "FAILED"


_NOTEBOOK = """
import json, logging, sys
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.runner import run_training

logging.basicConfig(level=logging.INFO)
args = json.loads(sys.argv[1])
result = run_training(
    "sm_train_fns:demo_train",
    args["ref"],
    {"epochs": 2, "batch_size": 16, "seed": 3},
    backend="kubeflow",
    backend_options=args["options"],
    data_filter=[["ds", "<=", args["day"]]],
    tracking=TrackingConfig(tracking_uri=args["mlflow_uri"]),
    experiment_name="notebook",
    run_key="nightly-digits",
    poll_interval=0.5,
)
airflow = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
print("RESULT " + json.dumps({"result": result.to_dict(), "airflow_modules": airflow}, default=str))
"""


def _notebook(env):
    args = {"ref": env["ref"], "options": env["options"], "day": DAYS[-1], "mlflow_uri": env["mlflow_uri"]}
    pythonpath = [str(Path(__file__).parents[1] / "engines"), os.environ.get("PYTHONPATH", "")]
    return subprocess.Popen(
        [sys.executable, "-c", _NOTEBOOK, json.dumps(args)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=env["tmp"],
    )


def test_run_training_without_airflow_reattaches_after_its_process_dies(kf_env):
    """A notebook's ``run_training(backend="kubeflow", run_key=...)`` is SIGKILLed while its TrainJob
    runs; the same call again finds the TrainJob by name and uid, waits and returns its result."""
    killed = _notebook(kf_env)
    try:
        (first, _) = _wait_running("dltrain-demo-train-")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
    name = first.rsplit("-node-", 1)[0]
    again = _notebook(kf_env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-4000:]
    assert f"re-attaching to kubeflow job {{'job_name': '{name}'" in err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    done = json.loads(line.removeprefix("RESULT "))
    assert done["airflow_modules"] == []
    result = done["result"]
    assert result["world_size"] == 2 and result["weights_sha256"]
    assert _run(kf_env, result["run_id"]).info.status == "FINISHED"


def test_a_trainjob_whose_image_is_missing_fails_naming_it_and_leaves_no_network(kf_env):
    """The SDK fails before its first container (no such image here, no registry to pull from) and
    its own clean-up leaves the TrainJob's network; the task fails without retries naming the image,
    and nothing of the TrainJob is left (``kf_env`` checks)."""
    from airflow.sdk.exceptions import AirflowFailException

    env = {**kf_env, "options": {**kf_env["options"], "image": "dltrain/no-such-image:missing"}}
    op = _operator(env, "train_no_image")
    missing = "InvalidSpecError: .*image 'dltrain/no-such-image:missing' is not on this machine"
    with pytest.raises(AirflowFailException, match=missing):  # a user error: no retry
        op.execute(_context(op.task_id))


def _bridge_gateway() -> str:
    """The host's address on Docker's default bridge (``docker0``): its gateway, or the subnet's
    first address, which Docker gives the bridge when the network lists no gateway."""
    import ipaddress

    (config,) = _docker("network", "inspect", "bridge", "-f", "{{json (index .IPAM.Config 0)}}")
    ipam = json.loads(config)
    return ipam.get("Gateway") or str(next(ipaddress.IPv4Network(ipam["Subnet"]).hosts()))


def _no_secret_fails_with_the_nodes_own_error(table, image, mlflow_dir):
    """Without the secret the nodes cannot fetch the job script: the task error shows the node's
    NoCredentialsError, which torchrun's summary pushes out of the log's last lines."""
    from airflow_provider_dltrain.exceptions import TrainingFailedError
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training import run_training

    options = {
        "runtime_backend": "container",
        "image": image,
        "num_nodes": 2,
        "staging_uri": "s3://lake/dltrain-staging",
        "container_mounts": [str(mlflow_dir)],
    }
    with pytest.raises(TrainingFailedError) as failed:
        run_training(
            "sm_train_fns:demo_train",
            table,
            HPARAMS,
            backend="kubeflow",
            backend_options=options,
            tracking=TrackingConfig(tracking_uri=f"sqlite:///{mlflow_dir}/no-secret.db"),
            run_key="no-secret",
            poll_interval=0.5,
        )
    message = str(failed.value)
    assert "ended Failed" in message and "the error of its process ---" in message, message[-3000:]
    assert "NoCredentialsError: Unable to locate credentials" in message, message[-3000:]
    assert not _left()


POINTS = 48


def _points_repo(root: Path) -> str:
    """A git repository (branch ``main``) whose ``points.csv`` is tracked by DVC, its content pushed to a
    local DVC remote and its cache removed: the ingest job reads it from the remote."""
    from dvc.repo import Repo

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)

    root.mkdir()
    git("init", "-q", "-b", "main")
    git("config", "user.email", "ci@example.com")
    git("config", "user.name", "ci")
    lines = ["id,x1,x2,label"]
    for i in range(POINTS):
        x1, x2 = (i % 7) / 7, (i % 5) / 5
        lines.append(f"{i},{x1:.3f},{x2:.3f},{int(x1 > x2)}")
    (root / "points.csv").write_text("\n".join(lines) + "\n")
    cwd = os.getcwd()
    os.chdir(root)  # DVC adds files relative to the working directory
    try:
        repo = Repo.init(str(root))
        with repo.config.edit() as conf:
            conf["remote"]["local"] = {"url": str(root.parent / "dvc-remote")}
            conf["core"]["remote"] = "local"
        repo.add("points.csv")
        repo.push()
        repo.close()
    finally:
        os.chdir(cwd)
    git("add", "-A")
    git("commit", "-q", "-m", "points")
    subprocess.run(["rm", "-rf", str(root / ".dvc" / "cache")], check=True)
    return str(root)


def test_the_documented_chain_dvc_processing_kubeflow_on_the_fake_s3_gate_and_ec2_scoring(
    kubeflow_image, tmp_path, monkeypatch
):
    """docs/examples/points_chain.py through ``airflow dags test``, as the Kubeflow page says: the fake
    AWS on the Docker bridge's gateway (not 0.0.0.0) with fresh keys in its 0600 file, which is this
    process's ``aws`` connection and the TrainJob's mounted secret (never its environment). A CSV that
    DVC versions becomes a Delta partition on the fake's S3 by a SageMaker Processing job; the sensor
    pins the cut-off; two Kubeflow nodes train from that version on S3; the gate promotes the model;
    one EC2 instance scores the date. Then the same TrainJob without the secret fails showing the
    node's own error. Nothing of the fake, no container and no network is left."""
    import shutil

    from deltalake import DeltaTable
    from mlflow import MlflowClient

    from airflow_provider_dltrain.lake.storage import s3_storage_options
    from airflow_provider_dltrain.testing.fake_aws_process import CLIENT_ENV_UNSET, start_fake_aws
    from tests.conftest import migrated_airflow_db

    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    dags = tmp_path / "dags"
    shutil.copytree(examples / "points", dags / "points", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(examples / "points_chain.py", dags / "points_chain.py")
    mlflow_dir = tmp_path / "mlflow"
    mlflow_dir.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("AIRFLOW__CORE__UNIT_TEST_MODE", *CLIENT_ENV_UNSET)
    }
    with start_fake_aws(tmp_path / "fake-aws", host=_bridge_gateway(), verbose=False) as fake:
        assert fake.env_file is not None and (fake.env_file.stat().st_mode & 0o077) == 0
        fake.create_bucket("lake")
        env.update(fake.env)
        env.update(
            {
                "AIRFLOW_HOME": str(tmp_path / "airflow"),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}",
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "DLTRAIN_HOME": str(tmp_path / "home"),
                "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_dir / 'mlflow.db'}",
                "DLTRAIN_POLL_INTERVAL": "1",
                "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site-cache"),
                "DVC_NO_ANALYTICS": "1",
                "POINTS_DATA_REPO": _points_repo(tmp_path / "points-data"),
                "POINTS_NODE_IMAGE": kubeflow_image,
                "POINTS_NODE_SECRETS": str(fake.env_file),
                "POINTS_MLFLOW_DIR": str(mlflow_dir),
            }
        )
        migrated_airflow_db(env)
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "test", "points_chain", "2026-11-24"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]

        key, secret = fake.credentials
        storage = s3_storage_options(
            access_key=key, secret_key=secret, region="us-east-1", endpoint_url=fake.endpoint_url
        )
        points = DeltaTable("s3://lake/lake/points", storage_options=storage)
        assert points.version() == 0 and points.to_pyarrow_table().num_rows == POINTS
        scored = DeltaTable("s3://lake/lake/point_predictions", storage_options=storage).to_pyarrow_table()
        assert sorted(scored.column("id").to_pylist()) == list(range(POINTS))
        sagemaker = fake.client("sagemaker")
        jobs = sagemaker.list_processing_jobs()["ProcessingJobSummaries"]
        assert [j["ProcessingJobStatus"] for j in jobs] == ["Completed"], jobs
        instances = [
            i for r in fake.client("ec2").describe_instances()["Reservations"] for i in r["Instances"]
        ]
        assert [i["State"]["Name"] for i in instances] == ["terminated"], instances
        # the registry of this store too: an earlier test in the worker may have set a global registry URI
        client = MlflowClient(
            tracking_uri=env["MLFLOW_TRACKING_URI"], registry_uri=env["MLFLOW_TRACKING_URI"]
        )
        (run,) = client.search_runs([client.get_experiment_by_name("points").experiment_id])
        assert run.info.status == "FINISHED" and run.data.tags["dltrain.backend"] == "kubeflow"
        assert run.data.tags["dltrain.world_size"] == "2", run.data.tags
        (version,) = client.search_model_versions("name='points'")
        assert client.get_model_version_by_alias("points", "champion").version == version.version
        assert set(scored.column("model_version").to_pylist()) == {int(version.version)}

        for name, value in fake.env.items():
            monkeypatch.setenv(name, value)
        for name in CLIENT_ENV_UNSET:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        pinned = {"uri": "s3://lake/lake/points", "version": points.version()}
        _no_secret_fails_with_the_nodes_own_error(pinned, kubeflow_image, mlflow_dir)
        assert fake.leaks() == []
    assert not _left()
