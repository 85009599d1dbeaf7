"""Amazon EMR on EC2: a step on an existing cluster, or a transient cluster per run.

The step is ``command-runner.jar spark-submit … job_script.py --spec … --code …``. The Python side
(deltalake, pyarrow, torch) comes from a virtualenv archive (``venv_archive_uri``, unpacked as
``./environment`` on every node) or from a bootstrap action the user configures. On an existing
cluster steps use ``ActionOnFailure=CONTINUE`` (a failing date must not kill a shared cluster); a
transient cluster runs one step and terminates itself, and is also terminated by ``teardown``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.resources import Clients, Resource, identity_of
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.engines.staging import StagedResults, Stager
from airflow_provider_dltrain.exceptions import InvalidSpecError

STEP_STATES = {
    "PENDING": PENDING,
    "CANCEL_PENDING": RUNNING,
    "RUNNING": RUNNING,
    "COMPLETED": SUCCEEDED,
    "CANCELLED": CANCELLED,
    "FAILED": FAILED,
    "INTERRUPTED": FAILED,
}
ACTIVE_CLUSTER = ["STARTING", "BOOTSTRAPPING", "RUNNING", "WAITING"]
ACTIVE_STEP = ["PENDING", "RUNNING", "CANCEL_PENDING"]


@dataclass(frozen=True)
class EmrOptions(Options):
    """``engine_options`` of ``engine="emr"`` (:class:`EmrEngine`).

    :param staging_uri: ``s3://`` prefix for the spec, script, code bundle and result.
    :param cluster_id: an existing cluster (``j-…``); without it each run creates a transient cluster.
    :param job_flow: the ``RunJobFlow`` request of the transient cluster (``ReleaseLabel``,
        ``Instances``, ``JobFlowRole``, ``ServiceRole``, ``LogUri``, …); ``Name``, ``Steps``,
        ``Tags`` and ``KeepJobFlowAliveWhenNoSteps`` are set here.
    :param venv_archive_uri: ``s3://…/venv.tar.gz`` made with venv-pack (Python with deltalake,
        pyarrow, torch, mlflow); sets ``spark.pyspark.python`` to its interpreter.
    :param spark_submit_args: more ``spark-submit`` arguments (``--conf k=v``, ``--executor-memory``).
    :param region: for console links (default: the connection's).
    """

    staging_uri: str
    cluster_id: str | None = None
    job_flow: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    venv_archive_uri: str | None = None
    spark_submit_args: Sequence[str] = ()
    region: str | None = None

    def check(self) -> None:
        if not self.cluster_id and not self.job_flow:
            raise InvalidSpecError(
                "emr needs cluster_id (an existing cluster) or job_flow (a RunJobFlow request for a "
                "transient cluster per run)"
            )
        self._set(job_flow=dict(self.job_flow or {}), spark_submit_args=tuple(self.spark_submit_args))


class EmrEngine(StagedResults):
    """Run stages as EMR steps (options: :class:`EmrOptions`)."""

    name = "emr"

    def __init__(self, clients: Any, options: EmrOptions | Mapping[str, Any]) -> None:
        self.options = EmrOptions.of(options)
        self.emr = clients("emr")
        self.stager = Stager(self.options.staging_uri, clients("s3"))

    def stage(self, spec: RunSpec) -> StagedRun:
        return self.stager.stage(spec)

    def step(self, staged: StagedRun) -> dict[str, Any]:
        """The ``StepConfig`` running the job script through ``spark-submit``."""
        args = ["spark-submit", "--deploy-mode", "client"]
        if self.options.venv_archive_uri:
            args += [
                "--archives",
                f"{self.options.venv_archive_uri}#environment",
                "--conf",
                "spark.pyspark.python=./environment/bin/python",
                "--conf",
                "spark.pyspark.driver.python=./environment/bin/python",
            ]
        args += [
            *self.options.spark_submit_args,
            staged.script_uri,
            "--spec",
            staged.spec_uri,
            "--code",
            staged.code_uri,
        ]
        return {
            "Name": staged.spec.identity.job_name,
            "ActionOnFailure": "CONTINUE" if self.options.cluster_id else "TERMINATE_CLUSTER",
            "HadoopJarStep": {"Jar": "command-runner.jar", "Args": args},
        }

    def submit(self, staged: StagedRun) -> JobHandle:
        step = self.step(staged)
        tags = [{"Key": k, "Value": v} for k, v in staged.spec.identity.tags().items()]
        if self.options.cluster_id:
            step_id = self.emr.add_job_flow_steps(JobFlowId=self.options.cluster_id, Steps=[step])["StepIds"][
                0
            ]
            return self._handle(self.options.cluster_id, step_id, staged.result_uri, transient=False)
        request = {
            **self.options.job_flow,
            "Name": staged.spec.identity.job_name,
            "Steps": [step],
            "Tags": [*self.options.job_flow.get("Tags", []), *tags],
        }
        request["Instances"] = {**request.get("Instances", {}), "KeepJobFlowAliveWhenNoSteps": False}
        cluster_id = self.emr.run_job_flow(**request)["JobFlowId"]
        step_id = self.emr.list_steps(ClusterId=cluster_id)["Steps"][0]["Id"]
        return self._handle(cluster_id, step_id, staged.result_uri, transient=True)

    def _handle(self, cluster_id: str, step_id: str, result_uri: str, *, transient: bool) -> JobHandle:
        url = None
        if self.options.region:
            url = (
                f"https://{self.options.region}.console.aws.amazon.com/emr/home?region={self.options.region}"
                f"#/clusterDetails/{cluster_id}"
            )
        created = {"cluster_id": cluster_id} if transient else {}
        return JobHandle(self.name, {"cluster_id": cluster_id, "step_id": step_id}, result_uri, url, created)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        prefix = identity.job_name.rsplit("-", 1)[0] + "-"
        if self.options.cluster_id:
            return self._find_step(self.options.cluster_id, prefix, transient=False)
        pages = self.emr.get_paginator("list_clusters").paginate(ClusterStates=ACTIVE_CLUSTER)
        for cluster in (c for page in pages for c in page.get("Clusters", [])):
            if cluster["Name"].startswith(prefix):
                found = self._find_step(cluster["Id"], prefix, transient=True)
                if found:
                    return found
        return None

    def _find_step(self, cluster_id: str, prefix: str, *, transient: bool) -> JobHandle | None:
        for step in self.emr.list_steps(ClusterId=cluster_id, StepStates=ACTIVE_STEP).get("Steps", []):
            if step["Name"].startswith(prefix):
                args = step["Config"]["Args"]
                spec_uri = args[args.index("--spec") + 1]
                result_uri = spec_uri.rsplit("/", 1)[0] + "/result.json"
                return self._handle(cluster_id, step["Id"], result_uri, transient=transient)
        return None

    def poll(self, handle: JobHandle) -> JobStatus:
        status = self.emr.describe_step(ClusterId=handle.ids["cluster_id"], StepId=handle.ids["step_id"])
        status = status["Step"]["Status"]
        raw = status["State"]
        details = status.get("FailureDetails") or {}
        message = details.get("Message") or status.get("StateChangeReason", {}).get("Message", "")
        if details.get("LogFile"):
            message = f"{message} (log: {details['LogFile']})"
        return JobStatus(STEP_STATES.get(raw, RUNNING), raw, message)

    def cancel(self, handle: JobHandle) -> None:
        self.emr.cancel_steps(
            ClusterId=handle.ids["cluster_id"],
            StepIds=[handle.ids["step_id"]],
            StepCancellationOption="TERMINATE_PROCESS",
        )

    def teardown(self, handle: JobHandle) -> None:
        cluster_id = handle.created.get("cluster_id")
        if cluster_id:
            self.emr.terminate_job_flows(JobFlowIds=[cluster_id])

    def log_location(self, handle: JobHandle) -> str:
        """The step's logs under the cluster's ``LogUri`` (EMR copies them there every few minutes)."""
        cluster_id, step_id = handle.ids["cluster_id"], handle.ids["step_id"]
        uri = self.emr.describe_cluster(ClusterId=cluster_id)["Cluster"].get("LogUri")
        if not uri:
            return (
                f"cluster {cluster_id} has no LogUri: the step's logs stay on the cluster "
                "(set LogUri in job_flow to keep them in S3)"
            )
        uri = re.sub(r"^s3[an]://", "s3://", uri).rstrip("/")
        return f"{uri}/{cluster_id}/steps/{step_id}/ (stderr.gz, stdout.gz)"


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "emr_cluster", "terminate"


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every starting or running EMR cluster carrying a task identity."""
    client = clients("emr")
    pages = client.get_paginator("list_clusters").paginate(ClusterStates=ACTIVE_CLUSTER)
    for summary in (c for page in pages for c in page.get("Clusters", [])):
        cluster = client.describe_cluster(ClusterId=summary["Id"])["Cluster"]
        identity = identity_of(cluster.get("Tags"))
        if identity is None:
            continue
        status = cluster["Status"]
        yield Resource(
            RESOURCE_KIND,
            cluster["Id"],
            identity,
            status["State"],
            status.get("Timeline", {}).get("CreationDateTime"),
            {"cluster_id": cluster["Id"]},
        )


def stop_resource(clients: Clients, res: Resource) -> None:
    clients("emr").terminate_job_flows(JobFlowIds=[res.ids["cluster_id"]])
