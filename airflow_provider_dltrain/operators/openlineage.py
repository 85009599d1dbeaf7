"""OpenLineage datasets for this provider's operators, built from what each operator returned.

The OpenLineage provider calls ``get_openlineage_facets_on_complete`` after a task succeeded; each
operator keeps the result it returned (:class:`LineageResultMixin`) and these helpers turn it into
datasets: a Delta table version is a dataset named after its URI (the OpenLineage naming of
``file`` / ``s3://bucket``) with a dataset version facet; a model is a dataset in the MLflow
tracking server's namespace. Nothing is read again from the tables or the registry. openlineage
is imported only here, when the provider asks: users without the ``[openlineage]`` extra pay
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset


def _require() -> None:
    from airflow_provider_dltrain.exceptions import require

    require("openlineage.client.event_v2", "openlineage")


def dataset_naming(uri: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a table or file URI: ``("file", /path)``, ``("s3://b", key)``."""
    from openlineage.client.naming.dataset import S3, LocalFileSystem, RemoteFileSystem

    from airflow_provider_dltrain.lake.storage import normalize_uri

    normalized = normalize_uri(uri)
    parts = urlsplit(normalized)
    if parts.scheme in ("s3", "s3a"):
        naming: Any = S3(bucket_name=parts.netloc, object_key=parts.path.lstrip("/") or "/")
    elif parts.scheme in ("", "file"):
        naming = LocalFileSystem(path=parts.path or normalized)
    else:
        naming = RemoteFileSystem(host=f"{parts.scheme}://{parts.netloc}", path=parts.path or "/")
    return naming.get_namespace(), naming.get_name()


def _versioned(namespace: str, name: str, version: object | None) -> Dataset:
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import dataset_version_dataset

    facets: dict[str, Any] = {}
    if version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
    return Dataset(namespace=namespace, name=name, facets=facets)


def delta_dataset(uri: str, version: object | None = None) -> Dataset:
    """One version of a Delta table (or a plain path, without a version) as an OpenLineage dataset."""
    return _versioned(*dataset_naming(uri), version)


def tracking_namespace(tracking_uri: str | None) -> str:
    """The MLflow tracking server as a namespace, never with the credentials of its URI."""
    from airflow_provider_dltrain.store.config import strip_userinfo

    return f"mlflow+{strip_userinfo(tracking_uri) or 'local'}"


def trained_model_dataset(tracking_uri: str | None, model_uri: str, run_id: str | None) -> Dataset:
    """The model a training run logged (``model_uri``), versioned by the MLflow run."""
    return _versioned(tracking_namespace(tracking_uri), model_uri, run_id)


def registered_model_dataset(tracking_uri: str | None, name: str, version: object) -> Dataset:
    """One version of a registered model, ``models/<name>`` at ``version``."""
    return _versioned(tracking_namespace(tracking_uri), f"models/{name}", version)


def operator_lineage(inputs: Iterable[Dataset], outputs: Iterable[Dataset]) -> OperatorLineage:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=list(inputs), outputs=list(outputs))


def dvc_dataset(dvc: Mapping[str, Any]) -> Dataset:
    """A DVC-tracked file: namespace ``dvc+<repo>``, its path, versioned by ``git:<commit> md5:<md5>``
    once pinned (:func:`~airflow_provider_dltrain.etl.dvc_inputs.resolve_dvc_input`)."""
    from airflow_provider_dltrain.store.config import strip_userinfo

    pinned = f"git:{dvc['commit']} md5:{dvc['md5']}" if dvc.get("commit") and dvc.get("md5") else None
    return _versioned(f"dvc+{strip_userinfo(str(dvc['repo']))}", str(dvc["path"]), pinned)


def input_datasets(inputs: Mapping[str, Any] | None) -> list[Dataset]:
    """The ETL's inputs: Delta inputs at their pinned version, DVC files at their commit, raw paths."""
    from airflow_provider_dltrain.etl.inputs import input_uri, is_delta_spec

    out = []
    for spec in (inputs or {}).values():
        if isinstance(spec, Mapping) and "dvc" in spec:
            out.append(dvc_dataset(spec["dvc"]))
            continue
        uri = input_uri(spec)
        if uri is None:
            continue
        version = spec["version"] if is_delta_spec(spec) and isinstance(spec, Mapping) else None
        out.append(delta_dataset(uri, getattr(spec, "version", version)))
    return out


class LineageResultMixin:
    """Keeps what ``execute`` returned so ``get_openlineage_facets_on_complete`` needs no re-reading."""

    _lineage_result: dict[str, Any] | None = None

    def _keep_for_lineage(self, result: Mapping[str, Any], **extra: Any) -> None:
        self._lineage_result = {**dict(result), **extra}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """Inputs and outputs of the finished task as OpenLineage datasets (empty when it returned nothing)."""
        _require()
        result = self._lineage_result
        if result is None:
            return operator_lineage([], [])
        inputs, outputs = self._lineage_datasets(result)
        return operator_lineage(inputs, outputs)

    def _lineage_datasets(self, result: dict[str, Any]) -> tuple[list[Dataset], list[Dataset]]:
        raise NotImplementedError
