"""Kubeflow Trainer: one TrainJob per task instance, created through the Kubeflow SDK.

``kubeflow.trainer.TrainerClient`` creates the TrainJob with a ``CustomTrainer`` whose function is
:func:`~.kubeflow_node.dltrain_train_job` (the SDK ships its source): torchrun on each of
``num_nodes`` nodes starts it with the staged job script, spec and code bundle, and it runs the rank
code every remote backend runs (the pinned version, the rows refused when they differ, training,
rank 0's report beside the spec). Two places run the same TrainJob:

* ``runtime_backend="kubernetes"`` (default): a cluster with Kubeflow Trainer v2 and the runtime
  (``torch-distributed`` or your own ClusterTrainingRuntime); the nodes read the lake and the staging
  area with their service account, MLflow credentials come from a Kubernetes Secret
  (``tracking_secret``), never from the TrainJob spec.
* ``runtime_backend="container"``: the SDK's Docker backend on this machine (a network per job, a
  container per node), with a local image (``IfNotPresent``) and the SDK's default runtimes (no
  download); ``container_mounts`` are bind-mounted at the same path (a lake, a staging area or an
  MLflow store on local disk) and ``secret_env_file`` read-only where the node function reads it (the
  store's keys, as a Secret volume on a cluster: :mod:`~.kubeflow_docker`), the MLflow credentials
  with them. The image must have no
  ENTRYPOINT: Docker gets the node's command as arguments of one (Kubernetes replaces it).

The TrainJob's name comes from the DAG, run, task and map index (``dltrain-<task>-<key>``), the same
for every try: a retry, a deferred task's trigger and ``run_training`` with the same ``run_key``
re-attach by that name *and* the job's uid (a TrainJob of the same name created since is another
job). Where the job writes its result is recorded beside the staged runs (``trainjob.json``).
``cancel`` deletes the TrainJob (its pods or containers go with it); ``teardown`` deletes a finished
one, so the name is free for the next try.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobFailedError,
    JobHandle,
    JobStatus,
    StagedRun,
)
from airflow_provider_dltrain.engines.kubeflow_docker import (
    SECRET_PATH,
    NodeMounts,
    check_environment,
    check_secret_file,
    drop_secret_file,
    job_secret_file,
    node_error_lines,
    remove_remains,
)
from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.engines.training_engine import TrainingEngine
from airflow_provider_dltrain.exceptions import InvalidSpecError, require
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS

log = logging.getLogger(__name__)

RUNTIME_BACKENDS = ("kubernetes", "container")
# the SDK's TrainJob states in ours; a TrainJob that is gone was deleted (a kill, a teardown)
STATES = {"Created": PENDING, "Running": RUNNING, "Complete": SUCCEEDED, "Failed": FAILED}
LOG_LINES = 20


@dataclass(frozen=True)
class KubeflowOptions(Options):
    """``backend_options`` of ``backend="kubeflow"`` (:class:`KubeflowEngine`).

    :param staging_uri: where the spec, code, results and rank reports go: an ``s3://`` prefix the
        nodes can read and write (their service account's role), or a directory every node mounts.
    :param image: the training image (``docker/jobs/Dockerfile.train``: Python 3.11, torch, deltalake, MLflow).
    :param num_nodes: nodes of the TrainJob, one rank each (the world size).
    :param runtime: the (Cluster)TrainingRuntime the TrainJob references (a torch runtime: torchrun).
    :param runtime_backend: ``"kubernetes"`` (a cluster) or ``"container"`` (Docker on this machine).
    :param resources_per_node: e.g. ``{"cpu": 4, "memory": "16Gi", "gpu": 1}`` (the SDK's keys).
    :param environment: more (non-secret) environment variables for every node; a secret's name
        (``AWS_SECRET_ACCESS_KEY``, ``MLFLOW_TRACKING_PASSWORD``, ...) is refused.
    :param namespace: the TrainJob's namespace (default: the kube-config context's).
    :param service_account: the nodes' service account (the one that may read the lake).
    :param tracking_secret: a Kubernetes Secret whose ``MLFLOW_TRACKING_*`` keys the nodes get as
        environment variables; required on a cluster when the MLflow connection has credentials.
    :param config_file: a kube-config file (default: ``~/.kube/config``, or in-cluster).
    :param context: the kube-config context.
    :param container_mounts: host directories mounted at the same path in every node container
        (``runtime_backend="container"`` only).
    :param secret_env_file: a file of ``NAME=value`` lines on this machine (mode 0600), mounted
        read-only into every node and set in the rank's environment (``runtime_backend="container"``
        only): e.g. the AWS keys and endpoint of a lake on S3, as ``dltrain fake-aws --env-file`` writes.
        Checked (present, private) where the job starts, not where the DAG is parsed.
    :param dashboard_url: the task's job link, ``{namespace}`` and ``{name}`` filled in.
    :param region: of an ``s3://`` staging prefix.
    """

    staging_uri: str
    image: str
    num_nodes: int = 2
    runtime: str = "torch-distributed"
    runtime_backend: str = "kubernetes"
    resources_per_node: Mapping[str, Any] | None = None
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    namespace: str | None = None
    service_account: str | None = None
    tracking_secret: str | None = None
    config_file: str | None = None
    context: str | None = None
    container_mounts: Sequence[str] = ()
    secret_env_file: str | None = None
    dashboard_url: str | None = None
    region: str | None = None

    def check(self) -> None:
        if self.runtime_backend not in RUNTIME_BACKENDS:
            raise InvalidSpecError(
                f"backend option runtime_backend must be one of {RUNTIME_BACKENDS}, "
                f"got {self.runtime_backend!r}"
            )
        if int(self.num_nodes) < 1:
            raise InvalidSpecError(f"backend option num_nodes must be >= 1, got {self.num_nodes!r}")
        if not self.image:
            raise InvalidSpecError("backend option image is required: the training image every node runs")
        if (self.container_mounts or self.secret_env_file) and self.runtime_backend != "container":
            raise InvalidSpecError(
                "container_mounts and secret_env_file are for runtime_backend='container' only (on a "
                "cluster the nodes' service account reads the lake, and tracking_secret names a Secret)"
            )
        environment = {str(k): str(v) for k, v in dict(self.environment or {}).items()}
        check_environment(environment)
        self._set(
            num_nodes=int(self.num_nodes),
            resources_per_node=dict(self.resources_per_node or {}) or None,
            environment=environment,
            container_mounts=tuple(str(m) for m in self.container_mounts),
        )


class KubeflowEngine(TrainingEngine):
    """Run ``train(ctx)`` as a Kubeflow TrainJob of ``num_nodes`` nodes, one rank per node (options:
    :class:`KubeflowOptions`; ``clients``: only ``s3`` is used, when ``staging_uri`` is on S3)."""

    name = "kubeflow"

    def __init__(self, clients: Any, options: KubeflowOptions | Mapping[str, Any]) -> None:
        from airflow_provider_dltrain.engines.staging import Stager

        self.options = KubeflowOptions.of(options)
        staging = str(self.options.staging_uri or "")
        self.stager = Stager(staging, clients("s3") if staging.startswith(("s3://", "s3a://")) else None)
        secret_file = self.options.secret_env_file
        self.secret_file = check_secret_file(secret_file) if secret_file else None
        self._credentials: dict[str, str] = {}
        self._client: Any = None

    @property
    def world_size(self) -> int:
        return self.options.num_nodes

    def set_job_credentials(self, credentials: Mapping[str, str]) -> None:
        """MLflow credentials: a mounted secret file on the container backend, a Secret on a cluster."""
        self._credentials = {k: v for k, v in credentials.items() if k in CREDENTIAL_KEYS and v}

    # -- the SDK ----------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The SDK's ``TrainerClient`` on the chosen backend, made on first use."""
        if self._client is None:
            require("kubeflow.trainer", "kubeflow")
            from kubeflow.trainer import TrainerClient

            if self.options.runtime_backend == "container":
                from kubeflow.trainer.backends.container.types import (
                    ContainerBackendConfig,
                    TrainingRuntimeSource,
                )

                # no runtime sources: the SDK's own defaults, never a download from GitHub
                config = ContainerBackendConfig(
                    pull_policy="IfNotPresent",
                    container_runtime="docker",
                    runtime_source=TrainingRuntimeSource(sources=[]),
                )
                self._client = TrainerClient(backend_config=config)
                backend = self._client.backend
                backend._adapter = NodeMounts(
                    backend._adapter, self.options.container_mounts, self.secret_file
                )
            else:
                from kubeflow.common.types import KubernetesBackendConfig

                cluster = KubernetesBackendConfig(
                    namespace=self.options.namespace,
                    config_file=self.options.config_file,
                    context=self.options.context,
                )
                self._client = TrainerClient(backend_config=cluster)
        return self._client

    def trainjob_name(self, identity: RunIdentity) -> str:
        """``dltrain-<task>-<key>``: the same for every try of a task instance, a valid DNS-1035 label."""
        task = re.sub(r"[^a-z0-9-]+", "-", identity.task_id.lower()).strip("-")[:20].strip("-") or "task"
        return f"dltrain-{task}-{identity.task_key[:12]}"

    def trainer(self, staged: StagedRun) -> Any:
        """The SDK's ``CustomTrainer`` for ``staged`` (its function, image, nodes, resources, env)."""
        from kubeflow.trainer import CustomTrainer

        from airflow_provider_dltrain.engines.kubeflow_node import dltrain_train_job

        args = {"script_uri": staged.script_uri, "spec_uri": staged.spec_uri, "code_uri": staged.code_uri}
        if self.secret_file or (self.options.runtime_backend == "container" and self._credentials):
            args["secret_env_file"] = SECRET_PATH  # a path: the values stay in the mounted file
        env = dict(self.options.environment)
        return CustomTrainer(
            func=dltrain_train_job,
            func_args=args,
            image=self.options.image,
            num_nodes=self.options.num_nodes,
            resources_per_node=self.options.resources_per_node,
            env=env or None,
        )

    def sdk_options(self, staged: StagedRun, name: str) -> list[Any]:
        """The SDK's options: the name, and on a cluster labels, annotations and the pod patch."""
        from kubeflow.trainer.options import Name

        if self.options.runtime_backend == "container":  # the SDK's container backend takes a name only
            return [Name(name)]
        from airflow_provider_dltrain.engines.kubeflow_cluster import cluster_options

        return [
            Name(name),
            *cluster_options(
                staged.spec.identity,
                staged.result_uri,
                credentials=self._credentials,
                service_account=self.options.service_account,
                tracking_secret=self.options.tracking_secret,
            ),
        ]

    # -- engine protocol --------------------------------------------------------------------------
    def submit(self, staged: StagedRun) -> JobHandle:
        identity = staged.spec.identity
        name = self.trainjob_name(identity)
        trainer, options = self.trainer(staged), self.sdk_options(staged, name)  # refused before anything
        self._remove_leftover(name)
        if self.options.runtime_backend == "container" and self._credentials:
            # the MLflow credentials as a cluster hands a Secret: a mounted file, never the environment
            secret = job_secret_file(name, self.secret_file, self._credentials)
            self.client.backend._adapter.mount_secret(secret)
        try:
            self.client.train(runtime=self.options.runtime, trainer=trainer, options=options)
        except Exception as err:
            raise self._not_created(name, err) from err
        handle = self._handle(name, self._uid(name), staged.result_uri)
        self.stager.put(self._pointer(identity), json.dumps(handle.to_dict(), sort_keys=True).encode())
        return handle

    def find(self, identity: RunIdentity) -> JobHandle | None:
        """This task instance's TrainJob if it is still running and is the one recorded (same uid)."""
        raw = self.stager.get(self._pointer(identity))
        if raw is None:
            return None
        handle = JobHandle.from_dict(json.loads(raw))
        status = self.poll(handle)
        return None if status.terminal else handle

    def poll(self, handle: JobHandle) -> JobStatus:
        name = handle.ids["job_name"]
        if self._uid(name) != handle.ids.get("uid"):
            return JobStatus(CANCELLED, "Deleted", f"TrainJob {name} (uid {handle.ids.get('uid')}) is gone")
        job = self.client.get_job(name)
        state = STATES.get(job.status, PENDING)
        message = self._failed_logs(job) if state == FAILED else ""
        return JobStatus(state, str(job.status), message)

    def cancel(self, handle: JobHandle) -> None:
        """Delete the TrainJob (its pods or containers and network go with it), if it is this one."""
        self._delete(handle)

    def teardown(self, handle: JobHandle) -> None:
        """Delete the TrainJob once it ended (a running one is left to its re-attaching try)."""
        name = handle.ids["job_name"]
        if self._uid(name) == handle.ids.get("uid") and STATES.get(self.client.get_job(name).status) in (
            SUCCEEDED,
            FAILED,
        ):
            self._delete(handle)

    def log_location(self, handle: JobHandle) -> str:
        name = handle.ids["job_name"]
        if self.options.runtime_backend == "container":
            return f"docker logs {name}-node-0 (… -node-{self.options.num_nodes - 1})"
        return f"kubectl logs -n {handle.ids.get('namespace')} -l jobset.sigs.k8s.io/jobset-name={name}"

    # -- helpers ----------------------------------------------------------------------------------
    def _pointer(self, identity: RunIdentity) -> str:
        return self.stager.uri("runs", identity.task_key, "trainjob.json")

    def _handle(self, name: str, uid: str | None, result_uri: str) -> JobHandle:
        namespace = getattr(self.client.backend, "namespace", None)
        url = None
        if self.options.dashboard_url:
            url = self.options.dashboard_url.format(namespace=namespace or "", name=name)
        return JobHandle(self.name, {"job_name": name, "uid": uid, "namespace": namespace}, result_uri, url)

    def _uid(self, name: str) -> str | None:
        """The uid of the TrainJob ``name`` (the container backend's: its network's id); ``None``: none."""
        backend = self.client.backend
        if self.options.runtime_backend == "container":
            network = backend._adapter.get_network(f"{name}-net")
            if not network or not backend._adapter.list_containers(
                filters={"label": [f"trainer.kubeflow.org/trainjob-name={name}"]}
            ):
                return None
            return str(network["id"])
        from kubeflow.trainer.constants import constants
        from kubernetes.client import ApiException

        try:
            job = backend.custom_api.get_namespaced_custom_object(
                constants.GROUP, constants.VERSION, backend.namespace, constants.TRAINJOB_PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return str(job["metadata"]["uid"])

    def _delete(self, handle: JobHandle) -> None:
        name = handle.ids["job_name"]
        if self._uid(name) != handle.ids.get("uid"):
            log.info("TrainJob %s (uid %s) is gone: nothing to delete", name, handle.ids.get("uid"))
            return
        self.client.delete_job(name)
        drop_secret_file(name)

    def _remove_leftover(self, name: str) -> None:
        """Delete an ended TrainJob of an earlier try holding the name; refuse to replace a running one."""
        uid = self._uid(name)
        if uid is None:
            return
        status = str(self.client.get_job(name).status)
        if STATES.get(status) in (PENDING, RUNNING):
            raise JobFailedError(
                f"TrainJob {name} exists and is {status}, but no try of this task recorded it: delete it "
                f"(kubectl delete trainjob {name}) or wait for it to end"
            )
        log.info("deleting TrainJob %s (%s), left by an earlier try", name, status)
        self.client.delete_job(name)
        drop_secret_file(name)

    def _not_created(self, name: str, err: Exception) -> Exception:
        """The error of a failed creation, once what the SDK left of the TrainJob is deleted."""
        if self.options.runtime_backend == "container":
            gone = remove_remains(self.client.backend._adapter, name)
            if gone:
                log.info("TrainJob %s was not created; removed %s", name, ", ".join(gone))
            if "Failed to ensure image" in str(err):
                return InvalidSpecError(
                    f"TrainJob {name}: image {self.options.image!r} is not on this machine and cannot be pulled "
                    f"({err}); build it (docs/engines/kubeflow.md) or name one that exists (docker images)"
                )
        return JobFailedError(f"the Kubeflow SDK did not create TrainJob {name}: {err}")

    def _node_log(self, job_name: str, step: Any) -> str:
        """The log of one node (the container backend's ``node-0`` step would give every node's)."""
        try:
            if self.options.runtime_backend == "container":
                return "".join(self.client.backend._adapter.container_logs(step.pod_name, False))
            return "".join(self.client.get_job_logs(job_name, step=step.name))
        except Exception as err:  # the logs are a courtesy: the failure is the job's status
            return f"(no logs: {err})"

    def _failed_logs(self, job: Any) -> str:
        """Each failed node's own error and last log lines (read before the job is deleted)."""
        lines: list[str] = []
        for step in job.steps:
            if step.status != "Failed" or not step.name.startswith("node"):
                continue
            text = self._node_log(job.name, step)
            all_lines = text.strip().splitlines()
            # the rank's own last words and traceback first: torchrun's summary fills the log's end
            lines.extend(line for line in all_lines if line.startswith("dltrain job failed on rank"))
            own = node_error_lines(text)
            if own:
                lines.append(f"--- {step.name} ({step.pod_name}): the error of its process ---")
                lines.extend(own)
            tail = all_lines[-LOG_LINES:]
            lines.append(f"--- {step.name} ({step.pod_name}), last {len(tail)} log lines ---")
            lines.extend(tail)
        return "\n".join(lines)
