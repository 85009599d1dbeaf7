"""A per-run EC2 cluster: launch rank 0, read its private IP, launch the workers, always terminate.

Each instance's user data renders a node plan (:mod:`~airflow_provider_dltrain.engines.ec2_plan`)
that starts ``torchrun`` with a static rendezvous at rank 0's address, or ``horovodrun --gloo``
from rank 0 over a per-run SSH key. The job's outcome is a status marker rank 0 writes to S3; an
instance that is gone before the marker exists (spot reclaim, dead-man switch, a crash) fails the
job with that instance's reason. Every instance carries the task's identity tags, so ``teardown``
terminates by tag, a retry re-attaches by tag, and ``dltrain reap`` finds instances whose task died.

EC2 ignores nothing here that matters, but moto ignores ``ClientToken``, and a token alone would not
cover a crash between rank 0's and the workers' launches: the cluster is deduplicated by a tag lookup
before each launch, so a retry completes the cluster it finds instead of starting a second one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines import ec2_instances
from airflow_provider_dltrain.engines.base import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.ec2_instances import (
    JOB_TAG,
    LIVE,
    MANAGED_TAG,
    RANK_TAG,
    terminate_job,
)
from airflow_provider_dltrain.engines.ec2_plan import (
    CONTROLLERS,
    HOROVODRUN,
    LAUNCHERS,
    PYTHON,
    NodePlan,
    ssh_key_pair,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.run_spec import RunIdentity, RunSpec
from airflow_provider_dltrain.engines.staging import Stager
from airflow_provider_dltrain.engines.train_spec import job_tracking_env
from airflow_provider_dltrain.engines.training_engine import TrainingEngine
from airflow_provider_dltrain.exceptions import InvalidSpecError

# Amazon Linux 2023 from its SSM public parameter; a Deep Learning AMI's parameter is better for GPUs.
DEFAULT_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
GONE = {"shutting-down", "terminated", "stopping", "stopped"}


@dataclass(frozen=True)
class Ec2Options(Options):
    """``backend_options`` of ``backend="ec2"`` and ``engine_options`` of ``engine="ec2"`` (:class:`Ec2Engine`).

    :param staging_uri: ``s3://`` prefix for the spec, code, markers, logs (and a Horovod run's key).
    :param instance_type: e.g. ``"g5.xlarge"``; every node gets the same.
    :param instance_count: number of nodes (rank 0 is the master / the horovodrun launcher).
    :param procs_per_node: ranks per node (GPUs per instance on GPU types).
    :param launcher: ``"torchrun"`` or ``"horovodrun"``.
    :param horovod_controller: how ``horovodrun`` starts the other nodes' ranks: ``"gloo"`` (its own
        runner over SSH) or ``"mpi"`` (``mpirun`` over SSH: the AMI needs Open MPI and a Horovod built
        with MPI).
    :param image_id: AMI id; default resolved from ``ami_parameter`` (an SSM public parameter).
    :param ami_parameter: the SSM parameter holding the AMI id (default: Amazon Linux 2023; a Deep
        Learning AMI's parameter is better for GPUs).
    :param instance_profile: instance profile name or ARN: the role the job runs as (S3, MLflow secret).
    :param subnet_id: subnet of every node (one subnet keeps the nodes close).
    :param security_group_ids: must allow all TCP between the nodes (rendezvous, NCCL/gloo, SSH).
    :param max_minutes: dead-man switch: every instance shuts down (and terminates) after this.
    :param master_port: rank 0's rendezvous port.
    :param setup_commands: shell lines run before the launcher (``source /opt/venv/bin/activate``).
    :param python: the Python on the AMI with torch, boto3 and the job's libraries.
    :param env: plain environment variables of the job (never secrets).
    :param secret_env: ``{VARIABLE: secret id}`` read from Secrets Manager on the node.
    :param key_name: an EC2 key pair for logging in while debugging (not needed to run).
    :param tracking_secret: Secrets Manager secret (name/ARN) holding the MLflow credentials as JSON,
        read by the job with the instance profile. Required when the ``mlflow`` connection has
        credentials: user data is readable by anyone allowed ``ec2:DescribeInstanceAttribute``.
    :param run_instances: more ``RunInstances`` fields (``BlockDeviceMappings``, ``InstanceMarketOptions``).
    :param region: for console links (default: the connection's).
    """

    staging_uri: str
    instance_type: str = "m5.xlarge"
    instance_count: int = 2
    procs_per_node: int = 1
    launcher: str = "torchrun"
    horovod_controller: str = "gloo"
    image_id: str | None = None
    ami_parameter: str = DEFAULT_AMI_PARAMETER
    instance_profile: str | None = None
    subnet_id: str | None = None
    security_group_ids: Sequence[str] = ()
    max_minutes: int = 240
    master_port: int = 29500
    setup_commands: Sequence[str] = ()
    python: str = "python3"
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    secret_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    key_name: str | None = None
    tracking_secret: str | None = None
    run_instances: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    region: str | None = None

    def check(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise InvalidSpecError(f"ec2 launcher must be one of {LAUNCHERS}, got {self.launcher!r}")
        if self.horovod_controller not in CONTROLLERS:
            raise InvalidSpecError(
                f"ec2 horovod_controller must be one of {CONTROLLERS}, got {self.horovod_controller!r}"
            )
        if int(self.instance_count) < 1 or int(self.procs_per_node) < 1 or int(self.max_minutes) < 1:
            raise InvalidSpecError("ec2 instance_count, procs_per_node and max_minutes must be >= 1")
        if not str(self.staging_uri).startswith(("s3://", "s3a://")):
            raise InvalidSpecError("ec2 staging_uri must be an s3:// prefix the instances can read")
        self._set(
            instance_count=int(self.instance_count),
            procs_per_node=int(self.procs_per_node),
            security_group_ids=tuple(self.security_group_ids),
            max_minutes=int(self.max_minutes),
            master_port=int(self.master_port),
            setup_commands=tuple(self.setup_commands),
            env=dict(self.env or {}),
            secret_env=dict(self.secret_env or {}),
            run_instances=dict(self.run_instances or {}),
        )


class Ec2Engine(TrainingEngine):
    """Run a training job on ``instance_count`` fresh EC2 instances, one node plan each (options:
    :class:`Ec2Options`).

    Each node runs ``job_script.py --spec <uri> --code <uri>`` under its launcher, the same entry
    as every other engine (a ``TrainJobSpec`` makes it train one rank).
    """

    name = "ec2"

    def __init__(self, clients: Any, options: Ec2Options | Mapping[str, Any]) -> None:
        self.options = Ec2Options.of(options)
        self.clients = clients
        self.ec2 = clients("ec2")
        self.stager = Stager(self.options.staging_uri, clients("s3"))
        self.env = dict(self.options.env or {})  # the job's, with the tracking secret's name once known

    @property
    def world_size(self) -> int:
        return self.options.instance_count * self.options.procs_per_node

    def set_job_credentials(self, credentials: Mapping[str, str]) -> None:
        """Only a secret's name goes into the user data, never the credentials themselves."""
        env = job_tracking_env(credentials, self.options.tracking_secret)
        if env and not self.options.tracking_secret:
            raise InvalidSpecError(
                "the mlflow connection has credentials, and EC2 user data is readable by anyone allowed "
                "ec2:DescribeInstanceAttribute: store them in Secrets Manager as JSON "
                '({"MLFLOW_TRACKING_USERNAME": ..., "MLFLOW_TRACKING_PASSWORD": ...}) and give its '
                "name as backend option tracking_secret"
            )
        self.env.update(env)

    # -- launching ---------------------------------------------------------------------------------
    def resolve_image(self) -> str:
        if self.options.image_id:
            return self.options.image_id
        try:
            return str(
                self.clients("ssm").get_parameter(Name=self.options.ami_parameter)["Parameter"]["Value"]
            )
        except Exception as err:
            raise InvalidSpecError(
                f"cannot resolve the AMI from SSM parameter {self.options.ami_parameter!r} ({err}); "
                "give engine option image_id or another ami_parameter"
            ) from err

    def stage(self, spec: Any) -> StagedRun:
        """A training job's spec with its checkpoint URI; a stage's ``RunSpec`` (ETL, scoring) as it is."""
        if isinstance(spec, RunSpec):
            return self.stager.stage(spec)
        return super().stage(spec)

    def submit(self, staged: StagedRun) -> JobHandle:
        """A training job on ``instance_count`` nodes; a stage (a ``RunSpec``) on one instance, whose
        entry runs under the plain Python with Spark ``local[*]``."""
        entry = {
            "script_uri": staged.script_uri,
            "args": ["--spec", staged.spec_uri, "--code", staged.code_uri],
        }
        run_uri = staged.result_uri.rsplit("/", 1)[0]
        identity = staged.spec.identity
        if isinstance(staged.spec, RunSpec):
            return self._launch_cluster(identity.job_name, identity.tags(), entry, run_uri, 1, PYTHON)
        return self._launch_cluster(identity.job_name, identity.tags(), entry, run_uri)

    def _launch_cluster(
        self,
        job: str,
        tags: Mapping[str, str],
        entry: dict[str, Any],
        run_uri: str,
        count: int | None = None,
        launcher: str | None = None,
    ) -> JobHandle:
        """Launch the ranks of ``job`` that have no live instance yet: rank 0 first, then the workers.

        ``count`` and ``launcher`` default to the options' (a training cluster); a stage run has one
        node under ``python``."""
        count, launcher = count or self.options.instance_count, launcher or self.options.launcher
        found = {int(i["rank"]): i for i in self._instances(job)}
        public_key = self._public_key(run_uri, fresh=0 not in found) if launcher == HOROVODRUN else None
        image = self.resolve_image() if len(found) < count else ""
        if 0 not in found:
            plan = self._plan(job, 0, None, entry, run_uri, count, launcher)
            found[0] = self._launch(plan, tags, image, public_key)
        master = found[0]["ip"]
        for rank in range(1, count):
            if rank not in found:  # a retry after a crash completes the cluster it found
                plan = self._plan(job, rank, master, entry, run_uri, count, launcher)
                found[rank] = self._launch(plan, tags, image, public_key)
        if launcher == HOROVODRUN:
            hosts = [found[r]["ip"] for r in range(count)]
            self.stager.put(f"{run_uri}/hosts.json", json.dumps({"hosts": hosts}).encode())
        ids = [found[r]["id"] for r in range(count)]
        return self._handle(job, ids, f"{run_uri}/result.json")

    def _plan(
        self,
        job: str,
        rank: int,
        master: str | None,
        entry: dict[str, Any],
        run_uri: str,
        count: int | None = None,
        launcher: str | None = None,
    ) -> NodePlan:
        launcher = launcher or self.options.launcher
        return NodePlan(
            job_name=job,
            node_rank=rank,
            num_nodes=count or self.options.instance_count,
            procs_per_node=self.options.procs_per_node if launcher != PYTHON else 1,
            master_addr=master,
            master_port=self.options.master_port,
            launcher=launcher,
            controller=self.options.horovod_controller,
            entry=entry,
            run_uri=run_uri,
            status_uri=f"{run_uri}/status.json",
            hosts_uri=f"{run_uri}/hosts.json",
            ssh_key_uri=f"{run_uri}/ssh/id_ed25519",
            wait_s=float(self.options.max_minutes * 60),
            env=self.env,
            secret_env=self.options.secret_env,
        )

    def _public_key(self, run_uri: str, *, fresh: bool) -> str:
        """The run's key pair: private half on S3 for rank 0 (removed at teardown), public in user data."""
        if not fresh:
            existing = self.stager.get(f"{run_uri}/ssh/id_ed25519.pub")
            if existing is not None:
                return existing.decode()
        private, public = ssh_key_pair()
        self.stager.put(f"{run_uri}/ssh/id_ed25519", private)
        self.stager.put(f"{run_uri}/ssh/id_ed25519.pub", public.encode())
        return public

    def user_data(self, plan: NodePlan, public_key: str | None = None) -> str:
        return ec2_instances.user_data(plan, self.options, public_key)

    def request(
        self, plan: NodePlan, identity_tags: Mapping[str, str], image: str, public_key: str | None
    ) -> dict[str, Any]:
        """The ``RunInstances`` request of one node."""
        return ec2_instances.run_instances_request(plan, self.options, identity_tags, image, public_key)

    def _launch(
        self, plan: NodePlan, tags: Mapping[str, str], image: str, public_key: str | None
    ) -> dict[str, Any]:
        instance = self.ec2.run_instances(**self.request(plan, tags, image, public_key))["Instances"][0]
        return {"id": instance["InstanceId"], "ip": instance.get("PrivateIpAddress"), "rank": plan.node_rank}

    # -- finding and watching ----------------------------------------------------------------------
    def _instances(self, job: str, states: Sequence[str] = LIVE) -> list[dict[str, Any]]:
        return ec2_instances.tagged(self.ec2, {JOB_TAG: job}, states)

    def find(self, identity: RunIdentity) -> JobHandle | None:
        """The cluster an earlier try of this task launched, completed if a crash cut its launch short."""
        live = ec2_instances.tagged(self.ec2, {"dltrain:task_key": identity.task_key}, ["pending", "running"])
        jobs = sorted({i["job"] for i in live}, key=lambda job: int(job.rsplit("-t", 1)[-1] or 0))
        if not jobs:
            return None
        job = jobs[-1]
        rank0 = [i for i in live if i["job"] == job and i["rank"] == "0"]
        if not rank0:  # workers without their master can never finish: end them, start afresh
            terminate_job(self.ec2, job)
            return None
        plan = self._plan_of(rank0[0]["id"])
        tags = {
            k: v
            for k, v in rank0[0]["tags"].items()
            if k.startswith("dltrain:") and k not in (JOB_TAG, RANK_TAG)
        }
        tags.pop(MANAGED_TAG, None)
        count, launcher = int(plan["num_nodes"]), str(plan["launcher"])
        return self._launch_cluster(job, tags, plan["entry"], plan["run_uri"], count, launcher)

    def _plan_of(self, instance_id: str) -> dict[str, Any]:
        import base64

        from airflow_provider_dltrain.engines.ec2_plan import parse_plan

        attribute = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return parse_plan(base64.b64decode(attribute["UserData"]["Value"]).decode())

    def _handle(self, job: str, instance_ids: list[str], result_uri: str) -> JobHandle:
        url = None
        if self.options.region:
            url = (
                f"https://{self.options.region}.console.aws.amazon.com/ec2/home?region={self.options.region}"
                f"#Instances:tag:{JOB_TAG}={job}"
            )
        ids = {"job_name": job, "instance_ids": instance_ids}
        return JobHandle(self.name, ids, result_uri, url, {"job_name": job})

    def poll(self, handle: JobHandle) -> JobStatus:
        run_uri = handle.result_uri.rsplit("/", 1)[0]
        marker = self._marker(f"{run_uri}/status.json")
        if marker is not None:
            state = SUCCEEDED if marker.get("state") == SUCCEEDED else FAILED
            return JobStatus(state, str(marker.get("state")), str(marker.get("error") or ""))
        instances = self._instances(handle.ids["job_name"], [*LIVE, "shutting-down", "terminated"])
        by_id = {i["id"]: i for i in instances}
        for instance_id in handle.ids["instance_ids"]:
            instance = by_id.get(instance_id)
            if instance is None or instance["state"] in GONE:
                failure = self._node_failure(run_uri, instance_id, instance)
                if failure is not None:
                    return failure
        if any(by_id.get(i, {}).get("state") == "pending" for i in handle.ids["instance_ids"]):
            return JobStatus(PENDING, "pending")
        return JobStatus(RUNNING, "running")

    def _node_failure(
        self, run_uri: str, instance_id: str, instance: dict[str, Any] | None
    ) -> JobStatus | None:
        """Why the job failed with this instance gone, or None when its node had finished fine."""
        if instance is None:
            return JobStatus(FAILED, "instance missing", f"EC2 instance {instance_id} no longer exists")
        marker = self._marker(f"{run_uri}/nodes/{instance['rank']}.json")
        if marker is not None and marker.get("state") == SUCCEEDED and instance["rank"] != "0":
            return None
        if marker is not None and marker.get("error"):
            return JobStatus(FAILED, "node failed", f"node {instance['rank']} failed: {marker['error']}")
        reason = instance["reason"] or "no reason given"
        return JobStatus(
            FAILED,
            f"instance {instance['state']}",
            f"EC2 instance {instance_id} (node {instance['rank']}) is {instance['state']} before the job "
            f"finished ({reason}): a spot reclaim, the {self.options.max_minutes}-minute dead-man switch or a "
            f"crash; its log, if any, is {run_uri}/logs/node-{instance['rank']}.log",
        )

    def _marker(self, uri: str) -> dict[str, Any] | None:
        raw = self.stager.get(uri)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return {"state": FAILED, "error": f"marker {uri} is not JSON"}
        return (
            data if isinstance(data, dict) else {"state": FAILED, "error": f"marker {uri} is not an object"}
        )

    def log_location(self, handle: JobHandle) -> str:
        """Each node's launcher log, which the node uploads before it shuts down."""
        run_uri = handle.result_uri.rsplit("/", 1)[0]
        nodes = len(handle.ids.get("instance_ids") or [0])
        return f"{run_uri}/logs/node-0.log" + (f" to node-{nodes - 1}.log" if nodes > 1 else "")

    # -- ending ------------------------------------------------------------------------------------
    def cancel(self, handle: JobHandle) -> None:
        """There is no job apart from the cluster: cancelling is terminating it."""
        self.teardown(handle)

    def teardown(self, handle: JobHandle) -> None:
        job = handle.created.get("job_name") or handle.ids["job_name"]
        terminate_job(self.ec2, job)
        run_uri = handle.result_uri.rsplit("/", 1)[0]
        self.stager.delete(f"{run_uri}/ssh/id_ed25519")
