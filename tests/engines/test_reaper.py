"""``reap``, ``dltrain reap`` and ``DltrainReapOperator`` against the fake AWS: resources of tasks that no
longer run are stopped (their processes really die), live tasks' and untagged resources survive.

Every test uses ``aws_leak_check``: it fails if anything is left alive, so what a test keeps it stops.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from reap_cloud import DAG_ID, ROLE, RUN_ID, Cloud, alive, wait_for, who

from airflow_provider_dltrain.engines.reaper import find_resources, parse_duration, reap
from airflow_provider_dltrain.testing.fake_aws_process import connection_json, credentials_for

CONN = "aws_fake"


@pytest.fixture
def cloud(aws_leak_check):
    made = Cloud(aws_leak_check)
    yield made
    made.close()


@pytest.fixture
def leaked(cloud):
    """Jobs of three tasks, as the engines submit them, all sleeping: a transient EMR cluster, a Glue run
    (of a mapped task) and an EMR Serverless run; and an untagged cluster that is not ours."""
    jobs = {
        "emr": (who("etl_emr"), *cloud.submit("emr", who("etl_emr"))),
        "glue": (who("etl_glue", map_index=2), *cloud.submit("glue", who("etl_glue", map_index=2))),
        "emr_serverless": (who("score"), *cloud.submit("emr_serverless", who("score"))),
    }
    untagged = cloud.cluster(None)
    yield jobs, untagged
    assert cloud.cluster_state(untagged) == "WAITING"  # nothing ever touched it
    cloud.client("emr").terminate_job_flows(JobFlowIds=[untagged])


def test_reap_stops_only_resources_of_tasks_that_no_longer_run(cloud, leaked):
    jobs, _untagged = leaked
    glue_identity, glue, glue_pid = jobs["glue"]
    found = {r.kind: r for r in find_resources(cloud.client)}
    assert set(found) == {"emr_cluster", "glue_job_run", "emr_serverless_job_run"}  # not the untagged one
    assert found["glue_job_run"].identity == glue_identity  # map index and all, from the run's arguments
    assert found["glue_job_run"].id == f"{glue.ids['job_name']}/{glue.ids['job_run_id']}"
    assert found["emr_cluster"].identity == who("etl_emr") and found["emr_cluster"].state == "RUNNING"
    assert found["emr_serverless_job_run"].identity == who("score")
    assert all(r.created is not None for r in found.values())

    outcomes = reap(cloud.client, lambda identity: identity == glue_identity)

    actions = {o.resource.kind: (o.action, o.reason) for o in outcomes}
    assert actions == {
        "emr_cluster": ("terminated", "task not running"),
        "glue_job_run": ("kept", "task running"),
        "emr_serverless_job_run": ("cancelled", "task not running"),
    }
    for engine, final in (("emr", "TERMINATED"), ("emr_serverless", "CANCELLED")):
        _identity, handle, pid = jobs[engine]
        assert wait_for(lambda h=handle: cloud.state(h), lambda s, f=final: s == f)
        wait_for(lambda p=pid: alive(p), lambda up: not up, 5.0)  # the job's process really died
    assert cloud.state(glue) == "RUNNING" and alive(glue_pid)

    # The Glue task has died too: the next sweep stops its run.
    again = reap(cloud.client, lambda identity: False)
    assert [(o.resource.kind, o.action) for o in again] == [("glue_job_run", "stopped")]
    assert wait_for(lambda: cloud.state(glue), lambda s: s == "STOPPED")
    wait_for(lambda: alive(glue_pid), lambda up: not up, 5.0)


def test_dry_run_and_older_than_touch_nothing(cloud, leaked):
    jobs, _untagged = leaked
    dry = reap(cloud.client, lambda identity: False, dry_run=True)
    assert sorted(o.action for o in dry) == ["would cancel", "would stop", "would terminate"]
    assert all(o.reaped for o in dry)
    young = reap(cloud.client, lambda identity: False, older_than=timedelta(days=2))
    assert [o.action for o in young] == ["kept"] * 3 and young[0].reason == "younger than 2 days, 0:00:00"
    assert len(find_resources(cloud.client)) == 3
    assert all(alive(pid) for _identity, _handle, pid in jobs.values())
    assert {o.action for o in reap(cloud.client, lambda identity: False)} == {
        "terminated",
        "stopped",
        "cancelled",
    }


def test_a_glue_run_without_the_whole_identity_takes_it_from_its_jobs_tags(cloud):
    glue, identity = cloud.client("glue"), who("old_etl", map_index=4)
    job = f"dltrain-old-{identity.task_key}"
    tags = {k: v for k, v in identity.tags().items() if k != "dltrain:run_id"}
    glue.create_job(
        Name=job,
        Role=ROLE,
        Command={"Name": "glueetl", "ScriptLocation": f"s3://{cloud.bucket}/sleep.py"},
        Tags={"dltrain:managed": "true", **tags},
    )
    spec = f"s3://{cloud.bucket}/pids/{job}.json"  # the arguments GlueEngine passed before reaping existed
    args = {"--spec": spec, "--dltrain-task-key": identity.task_key, "--dltrain-run-id": identity.run_id}
    run_id = glue.start_job_run(JobName=job, Arguments=args)["JobRunId"]
    [found] = find_resources(cloud.client)
    assert (found.kind, found.id, found.identity) == ("glue_job_run", f"{job}/{run_id}", identity)
    assert [o.action for o in reap(cloud.client, lambda who: False)] == ["stopped"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0s", timedelta()),
        ("90", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1.5h", timedelta(minutes=90)),
    ],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


def _dltrain(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def no_db_env(tmp_path):
    """A CLI environment whose Airflow DB is an empty SQLite file: there is no task state to ask."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp_path / 'empty.db'}"
    return env


def test_cli_reaps_by_age_when_there_is_no_airflow_db(cloud, leaked, no_db_env):
    jobs, _untagged = leaked
    endpoint = ["--endpoint-url", cloud.endpoint, "--region", "us-east-1"]
    # the fake's per-start keys, as a shell that sourced its --env-file has them
    no_db_env["AWS_ACCESS_KEY_ID"], no_db_env["AWS_SECRET_ACCESS_KEY"] = credentials_for(cloud.endpoint)
    emr_cluster = jobs["emr"][1].ids["cluster_id"]
    glue_run = "{job_name}/{job_run_id}".format(**jobs["glue"][1].ids)
    es_run = "{application_id}/{job_run_id}".format(**jobs["emr_serverless"][1].ids)

    def report(emr: str, glue: str, es: str) -> list[str]:
        return [
            f"emr_cluster {emr_cluster} dag={DAG_ID} run={RUN_ID} task=etl_emr RUNNING {emr} (task not running)",
            f"emr_serverless_job_run {es_run} dag={DAG_ID} run={RUN_ID} task=score RUNNING {es} (task not running)",
            f"glue_job_run {glue_run} dag={DAG_ID} run={RUN_ID} task=etl_glue[2] RUNNING {glue} (task not running)",
        ]

    dry = _dltrain("reap", *endpoint, "--older-than", "0s", "--dry-run", env=no_db_env)
    assert dry.returncode == 0, dry.stderr
    assert sorted(dry.stdout.splitlines()) == report("would terminate", "would stop", "would cancel")
    assert "no Airflow metadata DB" in dry.stderr
    assert all(cloud.state(handle) == "RUNNING" for _identity, handle, _pid in jobs.values())

    proc = _dltrain("reap", *endpoint, "--older-than", "0s", env=no_db_env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == report("terminated", "stopped", "cancelled")
    assert "reaped 3 of 3 dltrain resource(s)" in proc.stderr
    for _identity, handle, pid in jobs.values():
        assert wait_for(
            lambda h=handle: cloud.state(h), lambda s: s in ("TERMINATED", "STOPPED", "CANCELLED")
        )
        wait_for(lambda p=pid: alive(p), lambda up: not up, 5.0)


def test_cli_without_a_db_refuses_to_guess_unless_given_an_age(no_db_env):
    proc = _dltrain("reap", "--endpoint-url", "http://127.0.0.1:9", "--region", "us-east-1", env=no_db_env)
    assert proc.returncode == 2
    assert "no Airflow metadata DB" in proc.stderr and "--older-than" in proc.stderr
    assert "no task_instance table" in proc.stderr
    bad = _dltrain("reap", "--older-than", "2 fortnights", env=no_db_env)
    assert bad.returncode == 2 and "not like 90s, 30m, 2h" in bad.stderr


class SdkTaskInstance:
    """Stands in for the Task SDK's ``RuntimeTaskInstance.get_task_states``, the one boundary mocked here:
    a unit test has no execution API server behind it (``test_reaper_as_a_teardown_in_a_real_dag_run``
    runs the real one)."""

    def __init__(self, states: dict[tuple[str, str], dict[str, str]]) -> None:
        self.states = states
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def get_task_states(self, *, dag_id: str, run_ids: list[str]) -> dict[str, dict[str, str]]:
        self.calls.append((dag_id, tuple(run_ids)))
        return {
            run_id: self.states[(dag_id, run_id)] for run_id in run_ids if (dag_id, run_id) in self.states
        }


@pytest.fixture
def aws_conn(cloud, monkeypatch):
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", connection_json(cloud.endpoint))
    return CONN


def test_operator_asks_the_task_sdk_once_per_dag_run_and_returns_what_it_reaped(cloud, aws_conn):
    from airflow_provider_dltrain.operators import DltrainReapOperator

    running, mapped_failed, other_dag = who("etl"), who("etl", map_index=1), who("etl", dag_id="gone")
    ids = {
        name: cloud.cluster(identity)
        for name, identity in (("running", running), ("failed", mapped_failed), ("other", other_dag))
    }
    # get_task_states' shape: {run_id: {task_id: state}}, a mapped instance under f"{task_id}_{map_index}".
    ti = SdkTaskInstance(
        {(DAG_ID, running.run_id): {"etl": "running", "etl_0": "running", "etl_1": "failed"}}
    )
    young = DltrainReapOperator(task_id="reap_old", aws_conn_id=aws_conn, older_than="1d")
    assert young.execute({"ti": ti}) == []  # type: ignore[arg-type]
    op = DltrainReapOperator(task_id="reap", aws_conn_id=aws_conn)

    reaped = op.execute({"ti": ti})  # type: ignore[arg-type]

    assert sorted(r["id"] for r in reaped) == sorted([ids["failed"], ids["other"]])
    assert {r["action"] for r in reaped} == {"terminated"}
    failed = next(r for r in reaped if r["id"] == ids["failed"])
    assert (failed["dag_id"], failed["task_id"], failed["map_index"]) == (DAG_ID, "etl", 1)
    assert sorted(set(ti.calls)) == [("gone", (RUN_ID,)), (DAG_ID, (RUN_ID,))]
    assert len(ti.calls) == 2  # one call per DAG run, not per resource
    assert cloud.cluster_state(ids["running"]) == "WAITING"
    cloud.client("emr").terminate_job_flows(JobFlowIds=[ids["running"]])


def test_operator_fails_after_reaping_the_rest_when_a_resource_cannot_be_stopped(cloud, aws_conn):
    from airflow_provider_dltrain.exceptions import ReapFailedError
    from airflow_provider_dltrain.operators import DltrainReapOperator

    emr = cloud.client("emr")
    protected, plain = cloud.cluster(who("a")), cloud.cluster(who("b"))
    emr.set_termination_protection(JobFlowIds=[protected], TerminationProtected=True)
    op = DltrainReapOperator(task_id="reap", aws_conn_id=aws_conn)
    with pytest.raises(ReapFailedError, match=f"1 leaked resource.*emr_cluster {protected} "):
        op.execute({"ti": SdkTaskInstance({})})  # type: ignore[arg-type]
    assert cloud.cluster_state(plain) == "TERMINATED" and cloud.cluster_state(protected) == "WAITING"
    emr.set_termination_protection(JobFlowIds=[protected], TerminationProtected=False)
    emr.terminate_job_flows(JobFlowIds=[protected])


E2E_DAG = """
from __future__ import annotations

import boto3
from airflow.sdk import DAG, task

from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.operators import DltrainReapOperator

with DAG("dltrain_reap_e2e", schedule=None, catchup=False):

    @task
    def launch(**context) -> dict:
        # Clusters as a dead worker leaves them: one of this (finished) task, one of the running reaper.
        emr = boto3.client("emr", endpoint_url={endpoint!r}, region_name="us-east-1")
        ids = {{}}
        for owner in ("launch", "reap"):
            identity = RunIdentity(dag_id="dltrain_reap_e2e", run_id=context["run_id"], task_id=owner)
            ids[owner] = emr.run_job_flow(
                Name=identity.job_name,
                ReleaseLabel="emr-7.5.0",
                Instances={{"InstanceCount": 1, "MasterInstanceType": "m5.xlarge",
                           "KeepJobFlowAliveWhenNoSteps": True}},
                JobFlowRole="EMR_EC2_DefaultRole",
                ServiceRole="EMR_DefaultRole",
                Tags=[{{"Key": k, "Value": v}} for k, v in identity.tags().items()],
            )["JobFlowId"]
        return ids

    setup = launch()
    DltrainReapOperator(task_id="reap", aws_conn_id={conn!r}).as_teardown(setups=setup.operator)
"""


def _clusters_of(cloud: Cloud, dag_id: str) -> dict[str, tuple[str, dict[str, str]]]:
    """``task_id -> (cluster id, tags)`` of every cluster (in any state) tagged with ``dag_id``."""
    emr, found = cloud.client("emr"), {}
    for summary in emr.list_clusters()["Clusters"]:
        cluster = emr.describe_cluster(ClusterId=summary["Id"])["Cluster"]
        tags = {t["Key"]: t["Value"] for t in cluster.get("Tags", [])}
        if tags.get("dltrain:dag_id") == dag_id:
            found[tags["dltrain:task_id"]] = (cluster["Id"], tags)
    return found


def _set_task_state(dag_id: str, run_id: str, task_id: str, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    where = (TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
    with create_session() as session:
        assert session.execute(update(TaskInstance).where(*where).values(state=state)).rowcount == 1


@pytest.mark.slow
def test_reaper_as_a_teardown_in_a_real_dag_run_then_the_cli_asks_the_metadata_db(
    airflow_db, cloud, aws_conn, tmp_path
):
    # `airflow dags test` gives the task a real execution API (DB-backed, in process), so the
    # operator's get_task_states call is not mocked here.
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "reap_e2e.py").write_text(E2E_DAG.format(endpoint=cloud.endpoint, conn=aws_conn))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    # the DAG's own boto3 client (the dead worker's clusters) signs with the fake's per-start keys
    env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = credentials_for(cloud.endpoint)
    run = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "dltrain_reap_e2e"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    clusters = _clusters_of(cloud, "dltrain_reap_e2e")
    (finished, tags), (live, _) = clusters["launch"], clusters["reap"]
    assert cloud.cluster_state(finished) == "TERMINATED", output[-6000:]
    assert cloud.cluster_state(live) == "WAITING"  # its task (the reaper itself) was running
    assert "reaped 1 resource(s)" in output

    # The CLI with the same metadata DB: the reaper's task is running again → kept; finished → reaped.
    run_id, endpoint = tags["dltrain:run_id"], ["--endpoint-url", cloud.endpoint, "--region", "us-east-1"]
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    cli_env["AWS_ACCESS_KEY_ID"], cli_env["AWS_SECRET_ACCESS_KEY"] = credentials_for(cloud.endpoint)
    _set_task_state("dltrain_reap_e2e", run_id, "reap", "running")
    kept = _dltrain("reap", *endpoint, env=cli_env)
    assert kept.returncode == 0, kept.stderr
    assert "asking sqlite:///" in kept.stderr and "which tasks still run" in kept.stderr
    assert kept.stdout.strip().endswith("task=reap WAITING kept (task running)"), kept.stdout
    _set_task_state("dltrain_reap_e2e", run_id, "reap", "success")
    reaped = _dltrain("reap", *endpoint, env=cli_env)
    assert reaped.stdout.strip() == (
        f"emr_cluster {live} dag=dltrain_reap_e2e run={run_id} task=reap WAITING terminated (task not running)"
    ), reaped.stdout + reaped.stderr
    assert cloud.cluster_state(live) == "TERMINATED"
