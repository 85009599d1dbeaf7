"""The reaper's view of Kubeflow TrainJobs: the running ones dltrain created, and deleting one.

A TrainJob created by ``backend="kubeflow"`` on a cluster carries the label
``app.kubernetes.io/managed-by=airflow-provider-dltrain`` and its task's identity in ``dltrain.io/``
annotations (a run id does not fit a label value). :func:`live_resources` lists the ones not yet
Complete or Failed through the Kubeflow SDK's Kubernetes client; :func:`stop_resource` deletes one
(its pods go with it). ``trainjobs`` is a ``kubeflow.trainer.TrainerClient`` on a Kubernetes backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from airflow_provider_dltrain.engines.kubeflow_cluster import MANAGED_BY, identity_of
from airflow_provider_dltrain.engines.resources import Resource

RESOURCE_KIND, STOP_VERB = "kubeflow_trainjob", "stop"
ENDED = ("Complete", "Failed")


def trainer_client(
    namespace: str | None = None, config_file: str | None = None, context: str | None = None
) -> Any:
    """A ``TrainerClient`` on the cluster of the kube-config (or the in-cluster service account)."""
    from airflow_provider_dltrain.exceptions import require

    require("kubeflow.trainer", "kubeflow")
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    return TrainerClient(
        KubernetesBackendConfig(namespace=namespace, config_file=config_file, context=context)
    )


def live_resources(trainjobs: Any) -> Iterator[Resource]:
    """Every TrainJob of dltrain in the client's namespace that has not ended."""
    from kubeflow.trainer.constants import constants

    backend = trainjobs.backend
    listing = backend.custom_api.list_namespaced_custom_object(
        constants.GROUP,
        constants.VERSION,
        backend.namespace,
        constants.TRAINJOB_PLURAL,
        label_selector="=".join(MANAGED_BY),
    )
    for job in listing.get("items", []):
        meta = job.get("metadata", {})
        state = _state(job)
        identity = identity_of(meta.get("annotations") or {})
        if identity is None or state in ENDED:
            continue
        created = meta.get("creationTimestamp")
        yield Resource(
            RESOURCE_KIND,
            f"{backend.namespace}/{meta['name']}",
            identity,
            state,
            datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None,
            {"job_name": meta["name"], "uid": meta.get("uid", "")},
        )


def stop_resource(trainjobs: Any, res: Resource) -> None:
    trainjobs.delete_job(res.ids["job_name"])


def _state(job: dict[str, Any]) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ENDED and condition.get("status") == "True":
            return str(condition["type"])
    return "Running"
