"""What each adapter asks the service for (the exact requests), the spec's JSON contract, and the entry
point run as a plain process against S3 with the arguments Glue adds."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from engine_helpers import aws_client

from airflow_provider_dltrain.engines import RunIdentity, RunSpec, get_engine
from airflow_provider_dltrain.engines.base import StagedRun
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.testing.fake_aws_process import client, credentials_for

ID = RunIdentity(dag_id="nightly", run_id="scheduled__2026-11-28", task_id="ingest", try_number=2)
SPEC = RunSpec(
    stage="etl",
    table_uri="s3://lake/t",
    partition={"ds": "2026-11-28"},
    params={"transform": "etl_jobs:double", "inputs": {}, "transform_params": {}, "write": {}},
    identity=ID,
)
STAGED = StagedRun(
    SPEC,
    "s3://b/st/runs/k/2/spec.json",
    "s3://b/st/code/job.py",
    "s3://b/st/code/c.zip",
    "s3://b/st/runs/k/2/result.json",
)


def _clients(service):
    # never called by the request builders: no fake there, so no keys either
    return client(service, "http://127.0.0.1:9", credentials=("AKFANOTCALLED0000000", "not-called"))


def test_spec_round_trips_as_json_and_refuses_another_version_or_a_callable():
    assert RunSpec.from_json(SPEC.to_json()) == SPEC
    data = json.loads(SPEC.to_json())
    with pytest.raises(InvalidSpecError, match="same version on both"):
        RunSpec.from_json(json.dumps({**data, "version": 99}))
    with pytest.raises(InvalidSpecError, match=r"package\.module:function"):
        RunSpec(**{**SPEC.__dict__, "params": {"transform": len}}).to_json()
    assert ID.task_key == RunIdentity(**{**ID.__dict__, "try_number": 5}).task_key
    assert ID.job_name == f"dltrain-ingest-{ID.task_key}-t2"


def test_glue_job_definition_and_run_arguments():
    engine = get_engine("glue", _clients, {"staging_uri": "s3://b/st", "role": "GlueRole"})
    definition = engine.job_definition(STAGED)
    assert definition["Command"] == {
        "Name": "glueetl",
        "ScriptLocation": "s3://b/st/code/job.py",
        "PythonVersion": "3",
    }
    assert definition["DefaultArguments"]["--additional-python-modules"] == "deltalake==1.6.6,tenacity>=9"
    assert definition["GlueVersion"] == "5.0" and definition["ExecutionProperty"] == {"MaxConcurrentRuns": 16}


def test_emr_step_runs_the_script_through_spark_submit_with_the_venv_archive():
    engine = get_engine(
        "emr",
        _clients,
        {"staging_uri": "s3://b/st", "cluster_id": "j-1", "venv_archive_uri": "s3://b/venv.tar.gz"},
    )
    step = engine.step(STAGED)
    assert step["ActionOnFailure"] == "CONTINUE"  # a failing date never kills a shared cluster
    assert step["HadoopJarStep"] == {
        "Jar": "command-runner.jar",
        "Args": [
            "spark-submit",
            "--deploy-mode",
            "client",
            "--archives",
            "s3://b/venv.tar.gz#environment",
            "--conf",
            "spark.pyspark.python=./environment/bin/python",
            "--conf",
            "spark.pyspark.driver.python=./environment/bin/python",
            "s3://b/st/code/job.py",
            "--spec",
            STAGED.spec_uri,
            "--code",
            STAGED.code_uri,
        ],
    }
    transient = get_engine(
        "emr", _clients, {"staging_uri": "s3://b/st", "job_flow": {"ReleaseLabel": "emr-7.5.0"}}
    )
    assert transient.step(STAGED)["ActionOnFailure"] == "TERMINATE_CLUSTER"


def test_emr_serverless_request():
    engine = get_engine(
        "emr_serverless",
        _clients,
        {
            "staging_uri": "s3://b/st",
            "application_id": "app1",
            "execution_role_arn": "arn:aws:iam::1:role/R",
            "log_uri": "s3://b/logs",
        },
    )
    request = engine.request(STAGED)
    assert request["jobDriver"] == {
        "sparkSubmit": {
            "entryPoint": STAGED.script_uri,
            "entryPointArguments": ["--spec", STAGED.spec_uri, "--code", STAGED.code_uri],
        }
    }
    assert request["name"] == ID.job_name and request["tags"]["dltrain:run_id"] == ID.run_id
    assert request["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"] == {
        "logUri": "s3://b/logs"
    }


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("glue", {"staging_uri": "s3://b"}, "role"),
        ("emr", {"staging_uri": "s3://b"}, "cluster_id"),
        ("emr_serverless", {"staging_uri": "s3://b", "application_id": "a"}, "execution_role_arn"),
        (
            "glue",
            {"staging_uri": "s3://b", "role": "R", "workers": 3},
            "unknown engine option 'workers' for engine 'glue'",
        ),
        ("glue", {"staging_uri": "", "role": "R"}, "staging_uri is required"),
        ("dataproc", {}, "not available"),
    ],
)
def test_bad_engine_options_name_what_is_missing(name, options, match):
    with pytest.raises(InvalidSpecError, match=match):
        get_engine(name, _clients, options)


def test_code_bundle_is_deterministic_and_holds_the_provider_and_the_transform_module():
    import io
    import zipfile

    from airflow_provider_dltrain.engines.staging import code_bundle

    first, second = code_bundle(["etl_jobs"]), code_bundle(["etl_jobs"])
    assert first == second
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert "etl_jobs.py" in names and "airflow_provider_dltrain/jobs/entry.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_entry_point_as_a_process_ignores_glue_arguments_and_writes_its_result(fake_aws_endpoint, tmp_path):
    """The data plane alone: the staged script, S3 via environment only, unknown arguments tolerated."""
    from airflow_provider_dltrain.engines.staging import Stager

    bucket = f"entry-{uuid.uuid4().hex[:8]}"
    s3 = aws_client("s3", fake_aws_endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="in/raw.csv", Body=b"id,x\n1,2.0\n")
    spec = RunSpec(
        stage="etl",
        table_uri=f"s3://{bucket}/t",
        partition={"ds": "2026-11-28"},
        params={
            "transform": "etl_jobs:double",
            "inputs": {
                "raw": {"path": f"s3://{bucket}/in/raw.csv", "format": "csv", "options": {"header": "true"}}
            },
        },
        identity=ID,
    )
    staged = Stager(f"s3://{bucket}/st", s3).stage(spec)
    script = tmp_path / "job.py"
    script.write_bytes(s3.get_object(Bucket=bucket, Key=staged.script_uri.split("/", 3)[3])["Body"].read())
    env = {
        **{k: v for k, v in __import__("os").environ.items() if not k.startswith("AWS_")},
        "AWS_ENDPOINT_URL": fake_aws_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": credentials_for(fake_aws_endpoint)[0],
        "AWS_SECRET_ACCESS_KEY": credentials_for(fake_aws_endpoint)[1],
        "PYTHONPATH": str(Path.cwd()),
    }
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--JOB_ID",
            "j_1",
            "--spec",
            staged.spec_uri,
            "--code",
            staged.code_uri,
            "--job-bookmark-option",
            "job-bookmark-disable",
            "--TempDir",
            "s3://x/tmp",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(s3.get_object(Bucket=bucket, Key=staged.result_uri.split("/", 3)[3])["Body"].read())
    assert result["version"] == 0 and result["rows_written"] == 1 and result["uri"] == f"s3://{bucket}/t"
    assert "ignoring arguments added by the service" in out.stderr


def test_engine_trigger_reports_an_error_event_instead_of_dying():
    import asyncio

    from airflow_provider_dltrain.triggers.engines import EngineJobTrigger

    trigger = EngineJobTrigger(
        engine="glue",
        handle={"engine": "glue", "ids": {"job_name": "j", "job_run_id": "r"}, "result_uri": "s3://b/r.json"},
        engine_options={"staging_uri": "s3://b/st"},  # no role: the adapter refuses to build
        aws_conn_id=None,
        region_name="us-east-1",
    )
    event = asyncio.run(anext(trigger.run()))
    assert event.payload["state"] == "ERROR" and "role" in event.payload["message"]
    assert event.payload["handle"]["ids"]["job_run_id"] == "r"


def test_job_summary_of_a_scoring_job_and_an_unchanged_etl_job_names_rows_version_model_and_logs(tmp_path):
    from airflow_provider_dltrain.engines import JobHandle
    from airflow_provider_dltrain.engines.base import JobFailedError, JobStatus, job_summary, outcome

    engine = get_engine("spark_submit", _clients, {"master": "spark://h:7077", "staging_uri": str(tmp_path)})
    handle = JobHandle("spark_submit", {"pid": 42, "host": "worker-1", "log": "/logs/job.log"}, "r.json")
    scored = {
        "uri": "s3://lake/predictions",
        "version": 7,
        "committed": True,
        "rows_written": 400,
        "rows_quarantined": 0,
        "model_name": "digits",
        "model_version": "3",
    }
    assert job_summary(engine, handle, scored).splitlines() == [
        "spark_submit job pid=42 host=worker-1 log=/logs/job.log succeeded",
        "  table s3://lake/predictions version 7: committed",
        "  rows: 400 written, 0 quarantined",
        "  model digits version 3",
        "  logs: driver log /logs/job.log on worker-1",
    ]
    same = {
        "uri": "s3://lake/t",
        "version": 2,
        "committed": False,
        "rows_written": 10,
        "rows_quarantined": 2,
        "quarantine": {"uri": "s3://lake/t_quarantine", "version": 1},
        "quarantine_reasons": {"empty file": 2},
    }
    lines = job_summary(engine, handle, same).splitlines()
    assert (
        lines[1]
        == "  table s3://lake/t version 2: unchanged (the partition already held this content: nothing committed)"
    )
    assert lines[2] == (  # a re-run that committed nothing never says "written"
        "  rows: nothing written; the partition holds 10 row(s), its quarantine 2 (2 x empty file) "
        "in s3://lake/t_quarantine version 1"
    )
    # a failure names the same place to look
    (tmp_path / "r.json").write_text(json.dumps({"error": "ValueError: boom"}))
    failed = JobHandle("spark_submit", handle.ids, str(tmp_path / "r.json"))
    with pytest.raises(
        JobFailedError, match=r"boom\. Nothing was committed by it\. Logs: driver log /logs/job.log"
    ):
        outcome(engine, failed, JobStatus("FAILED", "FAILED"))


def test_a_job_whose_python_lacks_boto3_fails_naming_venv_archive_uri(tmp_path, monkeypatch):
    """An EMR (Serverless) job on a bare image with no archive: the first import fails, saying what to set."""
    import sys

    from airflow_provider_dltrain.jobs import job_script

    monkeypatch.setitem(sys.modules, "boto3", None)  # what a bare Python without the archive has
    with pytest.raises(ImportError, match=r"boto3.*the engine option venv_archive_uri"):
        job_script._fetch("s3://bucket/code/bundle.zip", str(tmp_path))
