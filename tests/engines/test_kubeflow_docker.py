"""backend="kubeflow" on the SDK's Docker backend: the secret file, the node's own error, the checks.

No Docker here (the container tier runs real TrainJobs: tests/containers/test_kubeflow_trainjobs.py):
the node function runs in this process on a job script of a few lines, the engine is only built, and
the log is the one torchrun 2.13 printed for a node whose script download had no credentials.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError

pytest.importorskip("kubeflow.trainer")

# a node's log as torchrun printed it (frames cut): the node's error, then torchrun's own traceback and summary
TORCHRUN_LOG = """\
Traceback (most recent call last):
  File "/tmp/train.py", line 41, in <module>
    dltrain_train_job(**{'script_uri': 's3://lake/runs/job_script.py'})
  File "/tmp/train.py", line 25, in dltrain_train_job
    boto3.client("s3").download_file(bucket, key, script)
  File "/usr/local/lib/python3.11/site-packages/botocore/auth.py", line 432, in add_auth
    raise NoCredentialsError()
botocore.exceptions.NoCredentialsError: Unable to locate credentials
E1207 00:37:52.553000 27590 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 6, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/tmp/train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_00:37:52
  host      : dltrain-train-abc-node-1
  rank      : 1 (local_rank: 0)
  exitcode  : 1 (pid: 27822)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_nodes_own_error_is_found_above_torchruns_summary():
    from airflow_provider_dltrain.engines.kubeflow_docker import node_error_lines

    lines = node_error_lines(TORCHRUN_LOG)
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "botocore.exceptions.NoCredentialsError: Unable to locate credentials"
    assert not [line for line in lines if "ChildFailedError" in line or "torchrun" in line]
    # the last 20 lines, all the task error showed before, hold torchrun's summary only
    assert "NoCredentialsError" not in "\n".join(TORCHRUN_LOG.splitlines()[-20:])
    assert node_error_lines("Master node is reachable\nall good\n") == []


def _secret_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "fake_aws.env"
    path.write_text(
        "# what dltrain fake-aws --env-file writes\n"
        "export AWS_ACCESS_KEY_ID=AKIDPERSTART\n"
        "export AWS_SECRET_ACCESS_KEY='s3cr3t with space'\n"
        "AWS_ENDPOINT_URL=http://172.17.0.1:4566\n"
    )
    path.chmod(mode)
    return path


def test_the_node_function_sets_the_mounted_secret_in_its_environment_before_the_job_script(tmp_path):
    from airflow_provider_dltrain.engines.kubeflow_node import dltrain_train_job

    script = tmp_path / "job_script.py"
    seen = tmp_path / "seen.txt"
    script.write_text(
        "import os\n"
        "def run(argv):\n"
        f"    open({str(seen)!r}, 'w').write(os.environ['AWS_SECRET_ACCESS_KEY'] + '|' + "
        "os.environ['AWS_ENDPOINT_URL'] + '|' + ' '.join(argv))\n"
        "    return 3\n"
    )
    saved = dict(os.environ)
    try:
        with pytest.raises(SystemExit) as exited:
            dltrain_train_job(
                f"file://{script}", "s3://b/spec.json", "s3://b/code.zip", str(_secret_file(tmp_path))
            )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert exited.value.code == 3  # the job script's outcome is the node's
    assert (
        seen.read_text()
        == "s3cr3t with space|http://172.17.0.1:4566|--spec s3://b/spec.json --code s3://b/code.zip"
    )


def _engine(tmp_path: Path, **options: Any) -> Any:
    from airflow_provider_dltrain.engines.kubeflow import KubeflowEngine, KubeflowOptions

    def clients(service: str) -> Any:
        raise AssertionError(f"no {service} client is needed")

    return KubeflowEngine(
        clients,
        KubeflowOptions(
            staging_uri=str(tmp_path / "staging"), image="dltrain/train-kubeflow:local", **options
        ),
    )


def test_the_secret_file_is_mounted_read_only_and_only_its_path_reaches_the_trainjob(tmp_path):
    from airflow_provider_dltrain.engines.kubeflow_docker import SECRET_PATH, NodeMounts

    secret = _secret_file(tmp_path)
    engine = _engine(tmp_path, runtime_backend="container", secret_env_file=str(secret))
    assert engine.secret_file == str(secret)

    class Docker:  # the SDK's Docker adapter, as far as the mounts go
        def create_and_start_container(self, **kwargs: Any) -> str:
            self.kwargs = kwargs
            return "c0"

    docker = Docker()
    adapter = NodeMounts(docker, ["/data"], engine.secret_file)
    adapter.create_and_start_container(
        image="i", environment={"OMP_NUM_THREADS": "1"}, volumes={"/w": {"bind": "/workspace", "mode": "rw"}}
    )
    assert docker.kwargs["volumes"] == {
        "/data": {"bind": "/data", "mode": "rw"},
        str(secret): {"bind": SECRET_PATH, "mode": "ro"},
        "/w": {"bind": "/workspace", "mode": "rw"},
    }
    assert "s3cr3t" not in repr(docker.kwargs)


def test_mlflow_credentials_reach_the_nodes_in_a_mounted_file_never_in_the_trainjob(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from airflow_provider_dltrain.engines.kubeflow_docker import (
        SECRET_PATH,
        NodeMounts,
        drop_secret_file,
        job_secret_file,
        secrets_dir,
    )

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    secret = _secret_file(tmp_path)
    engine = _engine(tmp_path, runtime_backend="container", environment={"OMP_NUM_THREADS": "1"})
    engine.set_job_credentials({"MLFLOW_TRACKING_PASSWORD": "pw with space", "MLFLOW_TRACKING_USERNAME": "u"})
    staged = SimpleNamespace(script_uri="s3://b/job.py", spec_uri="s3://b/spec.json", code_uri="s3://b/c.zip")
    trainer = engine.trainer(staged)
    assert trainer.env == {"OMP_NUM_THREADS": "1"}  # no credential in the TrainJob
    assert trainer.func_args["secret_env_file"] == SECRET_PATH

    path = Path(job_secret_file("dltrain-train-abc", str(secret), engine._credentials))
    assert path.parent == secrets_dir() and (path.stat().st_mode & 0o077) == 0
    assert (secrets_dir().stat().st_mode & 0o077) == 0
    text = path.read_text()
    assert text.startswith(secret.read_text()) and "MLFLOW_TRACKING_PASSWORD='pw with space'" in text

    class Docker:
        def create_and_start_container(self, **kwargs: Any) -> str:
            self.kwargs = kwargs
            return "c0"

    docker = Docker()
    adapter = NodeMounts(docker, [], str(secret))
    adapter.mount_secret(str(path))  # the TrainJob's file replaces the user's at the same place
    adapter.create_and_start_container(image="i")
    assert docker.kwargs["volumes"] == {str(path): {"bind": SECRET_PATH, "mode": "ro"}}
    assert "pw" not in repr(docker.kwargs)

    # what the node function makes of the file: the password with its space
    from airflow_provider_dltrain.engines.kubeflow_node import dltrain_train_job

    script, seen = tmp_path / "job_script.py", tmp_path / "seen.txt"
    script.write_text(
        f"import os\ndef run(argv):\n    open({str(seen)!r}, 'w').write(os.environ['MLFLOW_TRACKING_PASSWORD'])\n"
        "    return 0\n"
    )
    saved = dict(os.environ)
    try:
        with pytest.raises(SystemExit):
            dltrain_train_job(f"file://{script}", "s3://b/spec.json", "s3://b/code.zip", str(path))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert seen.read_text() == "pw with space"
    assert drop_secret_file("dltrain-train-abc") and not path.exists()
    assert not drop_secret_file("dltrain-train-abc")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"environment": {"AWS_SECRET_ACCESS_KEY": "x"}}, r"environment holds \['AWS_SECRET_ACCESS_KEY'\]"),
        (
            {"runtime_backend": "container", "secret_env_file": "MODE_0644"},
            r"open to other users \(mode 0644\)",
        ),
        ({"runtime_backend": "container", "secret_env_file": "/no/such/file"}, r"cannot be read"),
        ({"secret_env_file": "MODE_0600"}, r"runtime_backend='container' only"),
    ],
)
def test_a_secret_in_the_open_is_refused_before_anything_is_created(tmp_path, options, message):
    for key, value in options.items():
        if isinstance(value, str) and value.startswith("MODE_"):
            options[key] = str(_secret_file(tmp_path, int(value[5:], 8)))
    with pytest.raises(InvalidSpecError, match=message):
        _engine(tmp_path, **options)
