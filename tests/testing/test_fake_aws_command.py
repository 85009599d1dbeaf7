"""``dltrain fake-aws``, the pytest plugin's registration and the ``testing`` extra, as a user gets them."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from airflow_provider_dltrain.testing.fake_aws_keys import read_env_file
from airflow_provider_dltrain.testing.fake_aws_process import READY, client, live_job_groups

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_provider_dltrain"
PLUGIN = "airflow_provider_dltrain.testing.pytest_plugin"

SLEEPER = """\
import os, sys, time
open(sys.argv[sys.argv.index("--pid-to") + 1], "w").write(str(os.getpid()))
time.sleep(600)
"""


LIST_BUCKETS = "import boto3; print(*[b['Name'] for b in boto3.client('s3').list_buckets()['Buckets']])"


def _dltrain_fake_aws(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    cmd = [sys.executable, "-m", "airflow_provider_dltrain", "fake-aws", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines_until_ready(proc: subprocess.Popen) -> list[str]:
    lines: list[str] = []
    for line in proc.stdout:  # a plain blocking read, as a shell script's `read` would do
        lines.append(line.rstrip("\n"))
        if line.startswith(READY):
            return lines
    pytest.fail(f"no READY line (exit {proc.wait()}): {lines} {proc.stderr.read()[-2000:]}")


def _wait(done, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_the_command_creates_buckets_and_apps_prints_the_connection_and_stops_its_jobs_on_ctrl_c(tmp_path):
    from airflow.models.connection import Connection

    pids, env_file = tmp_path / "jobs.txt", tmp_path / "fake-aws.env"
    proc = _dltrain_fake_aws(
        "--bucket", "my-lake", "--emr-serverless-app", "spark", "--pid-file", str(pids), "--env-file", str(env_file)
    )  # fmt: skip
    try:
        lines = _lines_until_ready(proc)
        endpoint = lines[-1].split()[1]
        assert endpoint.startswith("http://127.0.0.1:")
        assert "bucket: s3://my-lake" in lines
        # fresh keys, in a file only this user reads: the secret is printed nowhere else
        assert env_file.stat().st_mode & 0o777 == 0o600
        exported = read_env_file(env_file)
        keys = (exported["AWS_ACCESS_KEY_ID"], exported["AWS_SECRET_ACCESS_KEY"])
        assert "testing" not in keys and keys[1] not in "\n".join(lines)
        (app_line,) = [line for line in lines if line.startswith("EMR Serverless application spark: ")]
        (app,) = client("emr-serverless", endpoint, credentials=keys).list_applications()["applications"]
        assert (app["name"], app["id"]) == ("spark", app_line.rsplit(" ", 1)[1])
        conn = Connection(conn_id="aws", uri=Connection.from_json(exported["AIRFLOW_CONN_AWS"]).get_uri())
        assert (conn.conn_type, conn.login, conn.password) == ("aws", *keys)
        assert conn.extra_dejson == {"endpoint_url": endpoint, "region_name": "us-east-1"}
        # the AWS_* exports, printed (without the secret) and in --env-file: a shell, notebook or Ray
        # node that sources the file alone (no profile, no endpoint of its own) reaches the fake
        exports = [line for line in lines if line.startswith("export ")]
        assert set(exports) < set(env_file.read_text().splitlines())
        assert f"export AWS_ENDPOINT_URL={endpoint}" in exports and "export AWS_REGION=us-east-1" in exports
        bare = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        listed = subprocess.run(
            ["bash", "-c", f'set -a; . {env_file}; exec {sys.executable} -c "{LIST_BUCKETS}"'],
            env=bare, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert listed.stdout.split() == ["my-lake"]

        # a Glue job that runs until it is stopped: Ctrl-C must stop it with the server
        s3, glue = client("s3", endpoint, credentials=keys), client("glue", endpoint, credentials=keys)
        s3.put_object(Bucket="my-lake", Key="sleep.py", Body=SLEEPER.encode())
        glue.create_job(
            Name="sleeper",
            Role="arn:aws:iam::123456789012:role/Glue",
            Command={"Name": "glueetl", "ScriptLocation": "s3://my-lake/sleep.py"},
        )
        job_pid_file = tmp_path / "job.pid"
        glue.start_job_run(JobName="sleeper", Arguments={"--pid-to": str(job_pid_file)})
        _wait(lambda: job_pid_file.exists() and job_pid_file.read_text(), what="the Glue job to start")
        assert live_job_groups(pids) == [int(job_pid_file.read_text())]

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()[-2000:]
        assert live_job_groups(pids) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_a_bad_bucket_name_is_refused_with_the_option_before_anything_starts():
    proc = _dltrain_fake_aws("--bucket", "my-lake", "--bucket", "My_Lake")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and READY not in out
    assert "argument --bucket: 'My_Lake' is not an S3 bucket name" in err


def test_own_keys_go_to_the_env_file_with_the_airflow_connection_and_never_to_stdout(tmp_path, capsys):
    from airflow_provider_dltrain.testing.fake_aws import _print_connection

    env_file = tmp_path / "own.env"
    env_file.write_text("old")
    env_file.chmod(0o644)  # written again 0600, whatever the file was
    _print_connection("http://127.0.0.1:9", ["lake"], {}, ("OWNKEY", "own-s3cret/+="), env_file)
    out = capsys.readouterr().out
    assert "own-s3cret" not in out and str(env_file) in out and out.endswith("READY http://127.0.0.1:9\n")
    assert env_file.stat().st_mode & 0o777 == 0o600
    exported = read_env_file(env_file)
    assert (exported["AWS_ACCESS_KEY_ID"], exported["AWS_SECRET_ACCESS_KEY"]) == ("OWNKEY", "own-s3cret/+=")
    conn = json.loads(exported["AIRFLOW_CONN_AWS"])  # the JSON form of an AIRFLOW_CONN_* variable
    assert (conn["conn_type"], conn["login"], conn["password"]) == ("aws", "OWNKEY", "own-s3cret/+=")


def test_the_cli_and_the_plugin_import_neither_moto_nor_boto3():
    code = (
        "import sys\n"
        "from airflow_provider_dltrain.cli import build_parser\n"
        "build_parser().parse_args(['fake-aws', '--bucket', 'my-lake'])\n"
        f"import {PLUGIN}\n"
        "loaded = [m for m in ('moto', 'boto3', 'botocore', 'airflow') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_other_module_of_the_package_imports_the_testing_package():
    importers = []
    for path in PACKAGE.rglob("*.py"):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.startswith("airflow_provider_dltrain.testing") for n in names):
                importers.append(path.relative_to(REPO).as_posix())
    assert set(importers) == {"airflow_provider_dltrain/cli.py"}  # lazily, for `dltrain fake-aws`


def test_the_testing_extra_is_in_dev_and_pinned_by_the_constraints():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = {r.split("[")[0].split(">")[0].split("=")[0].lower() for r in extras["testing"]}
    assert {"moto", "pytest"} <= names
    assert "airflow-provider-dltrain[all,docs]" in extras["dev"]  # [all] holds every extra, testing too
    (own,) = [r for r in extras["all"] if r.startswith("airflow-provider-dltrain[")]
    assert "testing" in own.split("[")[1].rstrip("]").split(",")
    constraints = (REPO / "constraints" / "constraints-3.11.txt").read_text().lower().splitlines()
    pinned = {line.split("==")[0] for line in constraints if "==" in line}
    assert names <= pinned, names - pinned
    assert project["entry-points"]["pytest11"] == {PLUGIN: PLUGIN}


def test_the_entry_point_and_the_projects_own_plugin_line_load_the_plugin_once(tmp_path):
    """Installed, the pytest11 entry point loads the plugin; tests/conftest.py names it again. pytest
    skips a second registration only when the names agree (otherwise: 'Plugin already registered')."""
    (entry,) = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][
        "pytest11"
    ].items()
    dist = tmp_path / "dltrain_ep-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dltrain-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{entry[0]} = {entry[1]}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    for extra in ([], ["-p", PLUGIN]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:xdist",
                "-q",
                "--fixtures",
                *extra,
                "tests/test_cli.py",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        assert any(line.startswith("fake_aws_server [session scope]") for line in lines), proc.stdout
        # the environment is set per test (function scope: pytest prints no scope for it)
        assert any(line.startswith("fake_aws -- ") for line in lines), proc.stdout


def test_a_job_process_group_left_alive_is_found_and_killed(tmp_path):
    from airflow_provider_dltrain.testing.fake_aws_process import _kill_left_over

    job = subprocess.Popen(["sleep", "600"], start_new_session=True)
    pids = tmp_path / "jobs.txt"
    pids.write_text(f"{job.pid} glue/123456789012/us-east-1/j/jr_1\n")
    try:
        assert live_job_groups(pids) == [job.pid]
        assert _kill_left_over(pids) == [job.pid]
        assert job.wait(timeout=10) == -signal.SIGKILL
        assert live_job_groups(pids) == []
    finally:
        job.kill()
        job.wait()
