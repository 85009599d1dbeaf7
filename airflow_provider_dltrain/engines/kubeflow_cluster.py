"""What a dltrain TrainJob carries on a Kubernetes cluster besides its trainer: labels, annotations,
the nodes' service account and MLflow's credentials from a Secret (the Kubeflow SDK's options).

Labels hold what fits a label value (the task key, the map index); the task's full identity goes
into ``dltrain.io/`` annotations (a run id such as ``scheduled__2026-12-05T00:00:00+00:00`` is no
label value), which the reaper reads back (:mod:`~.kubeflow_reaper`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS

PREFIX = "dltrain.io"
MANAGED_BY = ("app.kubernetes.io/managed-by", "airflow-provider-dltrain")


def cluster_options(
    identity: RunIdentity,
    result_uri: str,
    *,
    credentials: Mapping[str, str],
    service_account: str | None,
    tracking_secret: str | None,
) -> list[Any]:
    """The SDK's ``Labels``, ``Annotations`` and (with a service account or a Secret) ``RuntimePatch``."""
    from kubeflow.trainer.options import Annotations, Labels

    options: list[Any] = [
        Labels(
            {
                MANAGED_BY[0]: MANAGED_BY[1],
                f"{PREFIX}/task-key": identity.task_key,
                f"{PREFIX}/map-index": str(identity.map_index),
            }
        ),
        Annotations(
            {
                f"{PREFIX}/dag-id": identity.dag_id,
                f"{PREFIX}/run-id": identity.run_id,
                f"{PREFIX}/task-id": identity.task_id,
                f"{PREFIX}/map-index": str(identity.map_index),
                f"{PREFIX}/try-number": str(identity.try_number),
                f"{PREFIX}/result-uri": result_uri,
            }
        ),
    ]
    patch = pod_patch(credentials, service_account, tracking_secret)
    if patch is not None:
        options.append(patch)
    return options


def pod_patch(
    credentials: Mapping[str, str], service_account: str | None, tracking_secret: str | None
) -> Any:
    """The nodes' service account and the Secret's ``MLFLOW_TRACKING_*`` keys as their environment.

    Credentials are never written into the TrainJob: anyone who may get TrainJobs in the namespace
    reads its spec. With credentials and no Secret, nothing is created.
    """
    if credentials and not tracking_secret:
        raise InvalidSpecError(
            "the MLflow connection has credentials, and a TrainJob spec is readable by anyone who may "
            "get TrainJobs in the namespace: put them in a Kubernetes Secret (keys "
            f"{', '.join(CREDENTIAL_KEYS)}) and name it in backend option tracking_secret"
        )
    if not (service_account or tracking_secret):
        return None
    from kubeflow.trainer import options as o

    env = [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": tracking_secret, "key": key, "optional": True}}}
        for key in CREDENTIAL_KEYS
        if tracking_secret
    ]
    pod = o.PodSpecPatch(
        service_account_name=service_account,
        containers=[o.ContainerPatch(name="node", env=env)] if env else None,
    )
    template = o.JobTemplatePatch(spec=o.JobSpecPatch(template=o.PodTemplatePatch(spec=pod)))
    replicated = [o.ReplicatedJobPatch(name="node", template=template)]
    return o.RuntimePatch(
        training_runtime_spec=o.TrainingRuntimeSpecPatch(
            template=o.JobSetTemplatePatch(spec=o.JobSetSpecPatch(replicated_jobs=replicated))
        )
    )


def identity_of(annotations: Mapping[str, str]) -> RunIdentity | None:
    """The task identity in a TrainJob's annotations; ``None``: not dltrain's."""
    if f"{PREFIX}/run-id" not in annotations:
        return None
    return RunIdentity(
        dag_id=annotations.get(f"{PREFIX}/dag-id", "adhoc"),
        run_id=annotations[f"{PREFIX}/run-id"],
        task_id=annotations.get(f"{PREFIX}/task-id", "adhoc"),
        map_index=int(annotations.get(f"{PREFIX}/map-index", "-1")),
    )
