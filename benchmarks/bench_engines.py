"""Control-plane overhead of one cloud job: the adapter's round trip ÷ the job's entry point run directly.

For ``glue``, ``emr`` (a transient cluster per run) and ``emr_serverless`` on the fake AWS
(``airflow_provider_dltrain.testing``, started and stopped here as a child process), one ETL stage — a
``ROWS``-row CSV on the fake S3 → a new Delta table on the fake S3 — is timed two ways:

- **adapter**: ``engine.stage`` + ``engine.submit`` + ``engines.wait`` (poll every ``POLL_S`` s) +
  ``engines.outcome`` (reads the result) + ``engine.teardown``: what an operator does, without Airflow.
  The fake runs the staged ``job_script.py`` as a local process (its executor polls every 0.1 s).
- **reference**: ``python job_script.py --spec spec.json --code bundle.zip`` with the same spec,
  bundle and data, staged to a local directory beforehand (untimed), in the environment the fake's
  executor gives its jobs (``AWS_ENDPOINT_URL`` …, see ``airflow_provider_dltrain/testing/local_executor.py``).

Goal: adapter ≤ 1.2 x reference + 5 s. As a ratio (the convention of ``benchmarks/__main__.py``):
``adapter / reference <= 1.2 + 5 s / reference``, so the goal's number depends on this run's
reference. Each table is new (version 0), so both sides commit. Runs are interleaved (reference,
then adapter, per engine, ``REPEATS`` rounds, after one untimed reference job and staging as
warm-up) and the medians compared. The detail also splits the adapter's time into its phases: what
is not the job itself (stage, submit, until RUNNING is seen, result and teardown) is the control plane.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.testing.fake_aws_process import credentials_for, start_fake_aws

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("glue", "emr", "emr_serverless")
ROWS = 300
REPEATS = 3
POLL_S = 0.2
SLOWDOWN, GRACE_S = 1.2, 5.0
JOB_TIMEOUT_S = 600.0
PARTITION = {"ds": "2026-12-01"}


def double(spark, inputs, params):
    """The transform the jobs run (shipped in the code bundle as ``benchmarks.bench_engines``)."""
    from pyspark.sql import functions as F

    df = inputs["raw"]
    return df.select(F.col("id").cast("long").alias("id"), (F.col("x").cast("double") * 2).alias("x2"))


# -- the fake AWS --------------------------------------------------------------------------------------
def _job_env(endpoint: str) -> dict[str, str]:
    """What ``LocalCloudExecutor.launch`` gives a job (``DLTRAIN_ENGINE`` is read by nothing)."""
    env = dict(os.environ)
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            # the fake's per-start keys (from the 0600 file it wrote), as its jobs get them
            "AWS_ACCESS_KEY_ID": credentials_for(endpoint)[0],
            "AWS_SECRET_ACCESS_KEY": credentials_for(endpoint)[1],
            "DLTRAIN_ENGINE": "local-reference",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("AWS_PROFILE", None)
    return env


# -- one measurement each way ----------------------------------------------------------------------------
def _spec(bucket: str, table: str, run_id: str, task_id: str) -> Any:
    from airflow_provider_dltrain.engines import RunIdentity, RunSpec

    return RunSpec(
        stage="etl",
        table_uri=f"s3://{bucket}/lake/{table}",
        partition=dict(PARTITION),
        params={
            "transform": f"{__name__}:double",
            "inputs": {
                "raw": {
                    "path": f"s3://{bucket}/landing/raw.csv",
                    "format": "csv",
                    "options": {"header": "true"},
                }
            },
            "transform_params": {},
            "write": {},
            "spark_conf": {},
        },
        identity=RunIdentity(dag_id="bench_engines", run_id=run_id, task_id=task_id),
    )


def _check(result: dict[str, Any], where: str) -> None:
    if result.get("rows_written") != ROWS or not result.get("committed"):
        raise RuntimeError(f"{where}: unexpected result {result}")


def _time_adapter(engine: Any, spec: Any) -> dict[str, float]:
    """Seconds of stage / submit / wait / result+teardown and in total for one job through the adapter.

    ``to_running``: from the end of ``submit`` to the first poll that saw the job past pending.
    """
    from airflow_provider_dltrain.engines import outcome, wait
    from airflow_provider_dltrain.engines.base import PENDING

    t0 = time.perf_counter()
    staged = engine.stage(spec)
    t1 = time.perf_counter()
    handle = engine.submit(staged)
    t2 = time.perf_counter()
    seen: list[float] = []  # when a poll first saw the job started (the fake launched its process)

    def started(status: Any) -> None:
        if status.state != PENDING and not seen:
            seen.append(time.perf_counter())

    try:
        status = wait(engine, handle, poll_interval=POLL_S, timeout=JOB_TIMEOUT_S, on_status=started)
        t3 = time.perf_counter()
        result = outcome(engine, handle, status)
    finally:
        engine.teardown(handle)
    t4 = time.perf_counter()
    _check(result, f"{engine.name} job {handle.ids}")
    return {
        "stage": t1 - t0,
        "submit": t2 - t1,
        "to_running": (seen[0] if seen else t3) - t2,
        "wait": t3 - t2,
        "finish": t4 - t3,
        "total": t4 - t0,
    }


def _time_reference(spec: Any, directory: Path, env: dict[str, str]) -> float:
    """Seconds of ``python job_script.py --spec … --code …`` on a locally staged copy of ``spec``."""
    import json

    from airflow_provider_dltrain.engines.staging import Stager

    staged = Stager(str(directory)).stage(spec)  # untimed: spec, script and bundle as local files
    argv = [sys.executable, staged.script_uri, "--spec", staged.spec_uri, "--code", staged.code_uri]
    with open(directory / "stdout", "wb") as out, open(directory / "stderr", "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=JOB_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the job left (a JVM) goes with it
            proc.wait()
        elapsed = time.perf_counter() - started
    if returncode != 0:
        tail = (directory / "stderr").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"reference job exited {returncode}:\n{tail}")
    _check(json.loads(Path(staged.result_uri).read_text()), "reference job")
    return elapsed


def _live(clients: Any, application_id: str) -> list[str]:
    """Clusters and job runs still alive on the fake AWS once every job is done (should be none)."""
    alive = ["STARTING", "BOOTSTRAPPING", "RUNNING", "WAITING"]
    live = [c["Id"] for c in clients("emr").list_clusters(ClusterStates=alive)["Clusters"]]
    es = clients("emr-serverless")
    active = ["SUBMITTED", "PENDING", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING"]
    live += [r["id"] for r in es.list_job_runs(applicationId=application_id, states=active)["jobRuns"]]
    return live


# -- the benchmark -----------------------------------------------------------------------------------------
def run() -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    try:
        with start_fake_aws(root / "fake-aws", verbose=False) as fake:
            adapter, reference, leftovers = _measure(fake.endpoint_url, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _results(adapter, reference, leftovers)


def _measure(endpoint: str, root: Path) -> tuple[dict, dict, list[str]]:
    """Per engine: the adapter's phase times and the reference's seconds of every round; what is left alive."""
    import boto3
    from botocore.config import Config

    from airflow_provider_dltrain.engines import get_engine

    def clients(service: str) -> Any:
        key, secret = credentials_for(endpoint)
        return boto3.client(
            service,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 2}),
        )

    bucket = "bench-engines"
    s3 = clients("s3")
    s3.create_bucket(Bucket=bucket)
    csv = "id,x\n" + "".join(f"{i},{i * 0.5 - 40}\n" for i in range(ROWS))
    s3.put_object(Bucket=bucket, Key="landing/raw.csv", Body=csv.encode())
    es = clients("emr-serverless")
    app = es.create_application(name="bench", releaseLabel="emr-7.5.0", type="SPARK")["applicationId"]
    staging = f"s3://{bucket}/staging"
    options = {
        "glue": {"staging_uri": staging, "role": "arn:aws:iam::123456789012:role/GlueRole"},
        "emr": {
            "staging_uri": staging,
            "job_flow": {
                "ReleaseLabel": "emr-7.5.0",
                "Instances": {"InstanceCount": 1, "MasterInstanceType": "m5.xlarge"},
                "JobFlowRole": "EMR_EC2_DefaultRole",
                "ServiceRole": "EMR_DefaultRole",
            },
        },
        "emr_serverless": {
            "staging_uri": staging,
            "application_id": app,
            "execution_role_arn": "arn:aws:iam::123456789012:role/EmrServerlessRole",
        },
    }
    engines = {name: get_engine(name, clients, options[name]) for name in ENGINES}
    env = _job_env(endpoint)

    # Warm-up, untimed: imports on both sides, the page cache of Spark's jars, and the code
    # bundle uploaded once (content-addressed: later stagings of the same code upload nothing).
    engines["glue"].stage(_spec(bucket, "warmup", "warmup", "warmup"))
    (root / "warmup").mkdir()
    _time_reference(_spec(bucket, "warmup_ref", "warmup", "warmup"), root / "warmup", env)

    adapter: dict[str, list[dict[str, float]]] = {name: [] for name in ENGINES}
    reference: dict[str, list[float]] = {name: [] for name in ENGINES}
    for i in range(REPEATS):
        for name in ENGINES:
            directory = root / f"{name}-{i}"
            directory.mkdir()
            # A task of its own per round: the second run of one Glue task calls UpdateJob, which
            # moto 5.2.5 does not implement (500); a new task takes GetJob (not found) + CreateJob.
            spec = _spec(bucket, f"{name}_ref_{i}", f"ref-{i}", f"etl_{name}_{i}")
            reference[name].append(_time_reference(spec, directory, env))
            spec = _spec(bucket, f"{name}_{i}", f"bench-{i}", f"etl_{name}_{i}")
            adapter[name].append(_time_adapter(engines[name], spec))
    leftovers = _live(clients, app)
    es.stop_application(applicationId=app)
    es.delete_application(applicationId=app)
    return adapter, reference, leftovers


def _results(adapter: dict, reference: dict, leftovers: list[str]) -> list[dict]:
    results = []
    for name in ENGINES:
        ref = statistics.median(reference[name])
        phases = {k: statistics.median(run[k] for run in adapter[name]) for k in adapter[name][0]}
        total = phases["total"]
        limit = SLOWDOWN * ref + GRACE_S
        bound = SLOWDOWN + GRACE_S / ref
        goal = f"<= {bound:.3f}"
        passed = total / ref <= float(goal.split()[1])
        detail = (
            f"(adapter {total:.2f} s vs entry point {ref:.2f} s, median of {REPEATS}: overhead "
            f"{total - ref:+.2f} s, limit {SLOWDOWN} x ref + {GRACE_S:.0f} s = {limit:.2f} s, "
            f"{'PASS' if passed else 'MISS'}; adapter stage {phases['stage']:.2f} / submit "
            f"{phases['submit']:.2f} / wait {phases['wait']:.2f} (of which until RUNNING seen "
            f"{phases['to_running']:.2f}) / result+teardown {phases['finish']:.2f} s, "
            f"poll {POLL_S} s; runs adapter {[round(r['total'], 1) for r in adapter[name]]} "
            f"ref {[round(r, 1) for r in reference[name]]}"
            + (f"; LEFT ALIVE {leftovers}" if leftovers else "")
            + ")"
        )
        results.append(
            {
                "name": f"cloud job overhead {name}: adapter / entry point run directly",
                "ratio": total / ref,
                "goal": goal,
                "detail": detail,
                "passed": passed,
                "overhead_s": total - ref,
            }
        )
    return results
