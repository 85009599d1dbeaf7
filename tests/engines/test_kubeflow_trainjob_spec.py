"""backend="kubeflow" on Kubernetes: the exact TrainJob the SDK's own Kubernetes backend sends.

No cluster runs here. The Kubeflow SDK's ``KubernetesBackend`` builds and sends the TrainJob as it
would to a cluster; only HTTP is faked (``urllib3.PoolManager.request``, under the Kubernetes client):
a small API server that knows the runtime of ``docs/examples/kubeflow/runtime.yaml``, records what is
created and deleted, and answers for the TrainJobs it holds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

pytest.importorskip("kubeflow.trainer")

RUNTIME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "kubeflow" / "runtime.yaml"
API = "/apis/trainer.kubeflow.org/v1alpha1"


class FakeApiServer:
    """TrainJobs of namespace ``ml`` and the cluster runtime ``dltrain-torch``; everything else is 404."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.jobs: dict[str, dict[str, Any]] = {}

    def request(self, method: str, url: str, body: Any = None, **kwargs: Any) -> Any:
        import urllib3

        path = re.sub(r"^https?://[^/]+", "", url).split("?", 1)[0]
        status, data = self.answer(method, path, json.loads(body) if body else None)
        return urllib3.HTTPResponse(
            body=json.dumps(data).encode(),
            status=status,
            headers={"Content-Type": "application/json"},
            preload_content=True,
        )

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        jobs = f"{API}/namespaces/ml/trainjobs"
        if method == "GET" and path == f"{API}/clustertrainingruntimes/dltrain-torch":
            return 200, yaml.safe_load(RUNTIME.read_text())
        if method == "POST" and path == jobs:
            self.created.append(body)
            name = body["metadata"]["name"]
            self.jobs[name] = {
                **body,
                "metadata": {**body["metadata"], "namespace": "ml", "uid": f"uid-{name}"},
            }
            self.jobs[name]["metadata"]["creationTimestamp"] = "2026-12-06T00:00:00Z"
            return 201, self.jobs[name]
        if method == "GET" and path == jobs:
            return 200, {
                "apiVersion": f"{API[6:]}",
                "kind": "TrainJobList",
                "items": list(self.jobs.values()),
            }
        name = path.rsplit("/", 1)[-1]
        if path == f"{jobs}/{name}" and name in self.jobs:
            if method == "DELETE":
                self.deleted.append(name)
                return 200, self.jobs.pop(name)
            return 200, self.jobs[name]
        if method == "GET" and path == "/api/v1/namespaces/ml/pods":
            return 200, {"apiVersion": "v1", "kind": "PodList", "items": []}
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}


@pytest.fixture
def api():
    server = FakeApiServer()
    with mock.patch("urllib3.PoolManager.request", autospec=True) as request:
        request.side_effect = lambda pool, method, url, **kw: server.request(method, url, **kw)
        yield server


def _engine(**options: Any) -> Any:
    from kubernetes.client import Configuration

    from airflow_provider_dltrain.engines import get_engine

    engine = get_engine(
        "kubeflow",
        lambda service: mock.MagicMock(),
        {
            "staging_uri": "s3://lake/dltrain",
            "image": "registry.example.com/dltrain-train:1.0",
            "num_nodes": 2,
            "runtime": "dltrain-torch",
            "namespace": "ml",
            "resources_per_node": {"cpu": 4, "memory": "16Gi"},
            "dashboard_url": "https://kubeflow.example.com/trainjobs/{namespace}/{name}",
            **options,
        },
    )
    engine.stager = mock.MagicMock(get=mock.MagicMock(return_value=None))  # S3 is not the point here
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    config = Configuration(host="https://k8s.example.com")
    engine._client = TrainerClient(KubernetesBackendConfig(namespace="ml", client_configuration=config))
    return engine


def _staged() -> Any:
    from airflow_provider_dltrain.engines.base import StagedRun
    from airflow_provider_dltrain.engines.run_spec import RunIdentity

    identity = RunIdentity(
        dag_id="nightly", run_id="scheduled__2026-12-05T00:00:00+00:00", task_id="train_model", map_index=3
    )
    spec = mock.MagicMock(identity=identity)
    run = f"s3://lake/dltrain/runs/{identity.task_key}/2"
    return StagedRun(
        spec,
        f"{run}/spec.json",
        "s3://lake/dltrain/code/job_script-1.py",
        "s3://lake/dltrain/code/c.zip",
        f"{run}/result.json",
    )


def test_the_trainjob_is_the_one_the_sdk_sends_with_our_name_labels_patch_and_command(api):
    from airflow_provider_dltrain.engines.run_spec import RunIdentity

    engine = _engine(
        service_account="lake-reader", tracking_secret="mlflow-credentials", environment={"TZ": "UTC"}
    )
    engine.set_job_credentials({"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"})
    staged = _staged()
    key = RunIdentity(
        dag_id="nightly", run_id=staged.spec.identity.run_id, task_id="train_model", map_index=3
    ).task_key
    handle = engine.submit(staged)

    name = f"dltrain-train-model-{key[:12]}"
    assert handle.ids == {"job_name": name, "uid": f"uid-{name}", "namespace": "ml"}
    assert handle.console_url == f"https://kubeflow.example.com/trainjobs/ml/{name}"
    (job,) = api.created
    command = job["spec"]["trainer"].pop("command")
    secret_env = [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": "mlflow-credentials", "key": k, "optional": True}}}
        for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
    ]
    assert job == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "airflow-provider-dltrain",
                "dltrain.io/task-key": key,
                "dltrain.io/map-index": "3",
            },
            "annotations": {
                "dltrain.io/dag-id": "nightly",
                "dltrain.io/run-id": "scheduled__2026-12-05T00:00:00+00:00",
                "dltrain.io/task-id": "train_model",
                "dltrain.io/map-index": "3",
                "dltrain.io/try-number": "1",
                "dltrain.io/result-uri": staged.result_uri,
            },
        },
        "spec": {
            "runtimeRef": {"name": "dltrain-torch", "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": "registry.example.com/dltrain-train:1.0",
                "numNodes": 2,
                "resourcesPerNode": {
                    "limits": {"cpu": 4, "memory": "16Gi"},
                    "requests": {"cpu": 4, "memory": "16Gi"},
                },
                "env": [{"name": "TZ", "value": "UTC"}],  # no credential: they come from the Secret
            },
            "runtimePatches": [
                {
                    "manager": "trainer.kubeflow.org/kubeflow-sdk",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "spec": {
                                                        "serviceAccountName": "lake-reader",
                                                        "containers": [{"name": "node", "env": secret_env}],
                                                    }
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    # torchrun runs the node function, called with the staged URIs
    script = "\n".join(command)
    assert (
        "torchrun" in script
        and "def dltrain_train_job(script_uri: str, spec_uri: str, code_uri: str, secret_env_file" in script
    )
    assert (
        f"dltrain_train_job(**{{'script_uri': '{staged.script_uri}', 'spec_uri': '{staged.spec_uri}', "
        f"'code_uri': '{staged.code_uri}'}})" in script
    )
    assert "u" not in [e.get("value") for e in job["spec"]["trainer"]["env"]]


def test_a_retry_finds_the_trainjob_by_name_and_uid_and_cancel_deletes_it(api):
    engine = _engine()
    staged = _staged()
    handle = engine.submit(staged)
    engine.stager.get.return_value = json.dumps(handle.to_dict()).encode()  # the recorded trainjob.json

    assert engine.find(staged.spec.identity) == handle  # Created: still running
    engine.cancel(handle)
    assert api.deleted == [handle.ids["job_name"]]
    assert engine.find(staged.spec.identity) is None
    engine.cancel(handle)  # gone: nothing more to delete
    assert api.deleted == [handle.ids["job_name"]]


def test_a_trainjob_of_the_same_name_with_another_uid_is_not_this_job(api):
    from airflow_provider_dltrain.engines.base import CANCELLED

    engine = _engine()
    handle = engine.submit(_staged())
    api.jobs[handle.ids["job_name"]]["metadata"]["uid"] = "uid-of-a-later-job"
    assert engine.poll(handle).state == CANCELLED
    engine.cancel(handle)
    engine.teardown(handle)
    assert api.deleted == []


def test_mlflow_credentials_without_a_secret_are_refused_on_a_cluster(api):
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    engine = _engine()
    engine.set_job_credentials({"MLFLOW_TRACKING_TOKEN": "t"})
    with pytest.raises(InvalidSpecError, match="name it in backend option tracking_secret"):
        engine.submit(_staged())
    assert api.created == []


def test_the_reaper_deletes_a_running_trainjob_whose_task_no_longer_runs(api):
    from airflow_provider_dltrain.engines import reaper

    engine = _engine()
    handle = engine.submit(_staged())
    name = handle.ids["job_name"]
    ended = engine.submit(_staged_for("other_task"))
    api.jobs[ended.ids["job_name"]]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    seen = []

    def is_task_running(identity):
        seen.append(identity)
        return False

    with mock.patch.object(reaper, "ADAPTERS", ()):  # the AWS adapters are tested elsewhere
        outcomes = reaper.reap(lambda service: None, is_task_running, trainjobs=engine.client)
    (outcome,) = outcomes  # the Complete one is not a live resource
    assert outcome.action == "stopped" and outcome.resource.id == f"ml/{name}"
    from airflow_provider_dltrain.engines.run_spec import RunIdentity

    # the identity from the TrainJob's annotations: the task the reaper asks about
    assert seen == [RunIdentity(**_identity_fields())]
    assert api.deleted == [name]


def _identity_fields():
    return {
        "dag_id": "nightly",
        "run_id": "scheduled__2026-12-05T00:00:00+00:00",
        "task_id": "train_model",
        "map_index": 3,
    }


def _staged_for(task_id):
    from dataclasses import replace

    staged = _staged()
    spec = mock.MagicMock(identity=replace(staged.spec.identity, task_id=task_id))
    return replace(staged, spec=spec)


def test_a_misspelt_kubeflow_option_fails_when_the_dag_is_defined_and_the_dataclass_is_taken():
    from airflow_provider_dltrain.engines.kubeflow import KubeflowOptions
    from airflow_provider_dltrain.exceptions import InvalidSpecError
    from airflow_provider_dltrain.operators.training import TrainModelOperator

    kwargs = {
        "task_id": "train",
        "dataset": {"uri": "/tmp/t", "version": 1},
        "train_fn": "m:f",
        "backend": "kubeflow",
    }
    with pytest.raises(
        InvalidSpecError, match="unknown backend option 'num_node' for backend 'kubeflow'; valid: "
    ):
        TrainModelOperator(backend_options={"staging_uri": "s3://b/s", "image": "i", "num_node": 4}, **kwargs)
    typed = TrainModelOperator(backend_options=KubeflowOptions(staging_uri="s3://b/s", image="i"), **kwargs)
    assert typed.backend_options.num_nodes == 2 and typed.backend_options.runtime_backend == "kubernetes"
