"""The fake AWS runs what it is sent, so it answers only requests signed with its own credentials, and
its jobs see none of its secrets (issue #36)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from airflow_provider_dltrain.testing.fake_aws import credentials_from_env
from airflow_provider_dltrain.testing.fake_aws_process import FakeAws, client, start_fake_aws

ROLE = "arn:aws:iam::123456789012:role/Glue"
# writes its environment where its argument says: proof that it ran, and of what it saw
SCRIPT = """\
import json, os, sys
open(sys.argv[sys.argv.index("--out") + 1], "w").write(json.dumps(dict(os.environ)))
"""
SERVER_SECRET = "S3_SECRET_KEY"  # what the compose stack's S3 container holds besides the fake's keys


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAws]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SERVER_SECRET, "not-for-jobs")
        with start_fake_aws(tmp_path_factory.mktemp("fake-aws-auth"), verbose=False) as aws:
            aws.create_bucket("scripts")
            aws.client("s3").put_object(Bucket="scripts", Key="env.py", Body=SCRIPT.encode())
            yield aws


def _refused(call, code: str | None = None) -> ClientError:
    with pytest.raises(ClientError) as info:
        call()
    response = info.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403, response
    if code is not None:
        assert response["Error"]["Code"] == code, response
    return info.value


@pytest.mark.parametrize(
    ("keys", "glue_code", "s3_code"),
    [
        (("nobody", "wrong"), "UnrecognizedClientException", "InvalidAccessKeyId"),
        ((None, "wrong"), "SignatureDoesNotMatch", "SignatureDoesNotMatch"),
        (("testing", "testing"), "UnrecognizedClientException", "InvalidAccessKeyId"),
    ],
    ids=["unknown-key", "known-key-wrong-secret", "well-known-test-keys"],
)
def test_a_call_with_other_credentials_is_refused_and_runs_nothing(fake, tmp_path, keys, glue_code, s3_code):
    out = tmp_path / "ran.json"
    keys = (keys[0] or fake.credentials[0], keys[1])
    glue = client("glue", fake.endpoint_url, credentials=keys)
    s3 = client("s3", fake.endpoint_url, credentials=keys)
    _refused(
        lambda: glue.create_job(
            Name="intruder",
            Role=ROLE,
            Command={"Name": "glueetl", "ScriptLocation": "s3://scripts/env.py"},
        ),
        glue_code,
    )
    _refused(lambda: glue.start_job_run(JobName="intruder", Arguments={"--out": str(out)}), glue_code)
    _refused(lambda: s3.put_object(Bucket="scripts", Key="env.py", Body=b"import os"), s3_code)
    _refused(lambda: s3.list_objects_v2(Bucket="scripts"), s3_code)
    _refused(lambda: s3.head_object(Bucket="scripts", Key="env.py"))
    # refused before they reached the service: no job, so no run was recorded that could still start
    assert "intruder" not in fake.client("glue").list_jobs()["JobNames"]
    with pytest.raises(ClientError, match="EntityNotFoundException"):
        fake.client("glue").get_job_runs(JobName="intruder")
    assert not out.exists()
    body = fake.client("s3").get_object(Bucket="scripts", Key="env.py")["Body"].read()
    assert body == SCRIPT.encode()


def test_unsigned_requests_and_moto_api_are_refused(fake):
    for path in ("/scripts/env.py", "/moto-api/reset", "/?Action=ListUsers"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(fake.endpoint_url + path, timeout=10)
        assert info.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(fake.endpoint_url + "/moto-api/reset", method="POST"))
    assert info.value.code == 403
    assert fake.client("s3").head_object(Bucket="scripts", Key="env.py")  # nothing was reset


def _presigned(endpoint: str, key: str, secret: str, version: str = "s3v4", expires: int = 60) -> str:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(signature_version=version),
    )
    return s3.generate_presigned_url(
        "get_object", Params={"Bucket": "scripts", "Key": "env.py"}, ExpiresIn=expires
    )


def test_presigned_urls_work_with_the_fakes_keys_only(fake):
    key, secret = fake.credentials
    good = _presigned(fake.endpoint_url, key, secret)
    assert urllib.request.urlopen(good, timeout=10).read() == SCRIPT.encode()
    week_and_a_second = _presigned(fake.endpoint_url, key, secret, expires=7 * 24 * 3600 + 1)
    wrong = (_presigned(fake.endpoint_url, key, "wrong"), _presigned(fake.endpoint_url, key, secret, "s3"))
    for bad in (*wrong, week_and_a_second):
        with pytest.raises(urllib.error.HTTPError) as info:  # a wrong secret; SigV2, never accepted
            urllib.request.urlopen(bad, timeout=10)
        assert info.value.code in (400, 403)


def test_delta_rs_signs_requests_the_fake_accepts(fake, monkeypatch):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    options = {
        "AWS_ENDPOINT_URL": fake.endpoint_url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": fake.credentials[0],
        "AWS_SECRET_ACCESS_KEY": fake.credentials[1],
    }
    table = pa.table({"ds": ["2026-01-01", "2026-01-02"], "x": [1, 2]})
    uri = "s3://scripts/tables/with space+plus"
    write_deltalake(uri, table, partition_by=["ds"], storage_options=options)
    write_deltalake(uri, table, mode="append", partition_by=["ds"], storage_options=options)
    assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 4
    with pytest.raises(OSError):
        DeltaTable(uri, storage_options={**options, "AWS_SECRET_ACCESS_KEY": "wrong"})


def test_a_job_sees_the_fakes_endpoint_and_keys_and_none_of_its_secrets(fake, tmp_path):
    out = tmp_path / "env.json"
    glue = fake.client("glue")
    glue.create_job(
        Name="env", Role=ROLE, Command={"Name": "glueetl", "ScriptLocation": "s3://scripts/env.py"}
    )
    run_id = glue.start_job_run(JobName="env", Arguments={"--out": str(out)})["JobRunId"]
    deadline = time.monotonic() + 30
    while (state := glue.get_job_run(JobName="env", RunId=run_id)["JobRun"]["JobRunState"]) not in (
        "SUCCEEDED",
        "FAILED",
    ):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state == "SUCCEEDED"
    env = json.loads(out.read_text())
    assert env["AWS_ENDPOINT_URL"] == fake.endpoint_url
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == fake.credentials
    assert SERVER_SECRET not in env
    assert not [name for name in env if name.startswith("DLTRAIN_FAKE_AWS")]
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env  # the rest of the host's environment neither
    assert set(env) <= set(os.environ) | {
        "AWS_ENDPOINT_URL",
        "AWS_ALLOW_HTTP",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "DLTRAIN_ENGINE",
        "PYTHONUNBUFFERED",
        "PYTHONPATH",
        "LC_CTYPE",  # Python's own locale coercion
    }


def test_the_well_known_keys_are_refused_unless_asked_for_and_then_on_loopback_only(monkeypatch):
    monkeypatch.setenv("DLTRAIN_FAKE_AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(ValueError, match="--insecure-well-known-keys"):
        credentials_from_env("127.0.0.1")  # loopback is no boundary between a machine's users
    assert credentials_from_env("127.0.0.1", well_known=True) == ("testing", "testing")
    with pytest.raises(ValueError, match="loopback address only"):
        credentials_from_env("0.0.0.0", well_known=True)


def test_each_start_makes_fresh_keys_and_own_keys_are_taken_out_of_the_environment(monkeypatch):
    monkeypatch.delenv("DLTRAIN_FAKE_AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY", raising=False)
    first, second = credentials_from_env("127.0.0.1"), credentials_from_env("0.0.0.0")
    assert first != second and len(first[0]) == 20 and len(first[1]) >= 40 and "testing" not in first
    monkeypatch.setenv("DLTRAIN_FAKE_AWS_ACCESS_KEY_ID", "stack")
    monkeypatch.setenv("DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY", "s3cret")
    assert credentials_from_env("0.0.0.0") == ("stack", "s3cret")
    assert "DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY" not in os.environ
    monkeypatch.setenv("DLTRAIN_FAKE_AWS_ACCESS_KEY_ID", "stack")
    with pytest.raises(ValueError, match="both"):
        credentials_from_env("0.0.0.0")


def test_the_fixtures_keys_are_in_a_file_only_its_user_reads_and_a_process_without_it_is_refused(fake):
    """A second local user knows the port and the well-known keys, not the 0600 file: it runs nothing."""
    assert fake.env_file is not None and fake.env_file.stat().st_mode & 0o777 == 0o600
    assert fake.credentials[1] in fake.env_file.read_text()
    intruder = (
        "import boto3, sys\n"
        "s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',"
        " aws_access_key_id='testing', aws_secret_access_key='testing')\n"
        "try:\n    s3.put_object(Bucket='scripts', Key='env.py', Body=b'import os')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}  # no key file, no AWS variable
    out = subprocess.run(
        [sys.executable, "-c", intruder, fake.endpoint_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "InvalidAccessKeyId" in out.stdout, out.stdout + out.stderr[-2000:]
    assert fake.client("s3").get_object(Bucket="scripts", Key="env.py")["Body"].read() == SCRIPT.encode()


def test_every_start_creates_the_instance_profile_ec2_nodes_run_as(fake):
    """What an EC2 stage asks for on the fake, with nothing made by hand (issue #50): the profile (the
    EC2 stage tests launch their instances with it) and the AMI parameter the engine resolves."""
    from airflow_provider_dltrain.engines.ec2 import DEFAULT_AMI_PARAMETER
    from airflow_provider_dltrain.testing.fake_aws import AMI_PARAMETER

    assert AMI_PARAMETER == DEFAULT_AMI_PARAMETER  # what the fake prints is what the engine resolves
    profile = fake.client("iam").get_instance_profile(InstanceProfileName=fake.instance_profile)
    (role,) = profile["InstanceProfile"]["Roles"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_the_compose_stack_gives_the_fake_its_own_keys():
    import yaml

    offline = yaml.safe_load(
        (Path(__file__).parents[2] / "docker" / "stack" / "compose.offline.yaml").read_text()
    )
    env = offline["services"]["s3"]["environment"]
    assert env["DLTRAIN_FAKE_AWS_ACCESS_KEY_ID"].startswith("${DLTRAIN_S3_ACCESS_KEY")
    assert env["DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY"].startswith("${DLTRAIN_S3_SECRET_KEY")
