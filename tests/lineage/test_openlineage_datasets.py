"""How table versions and models are named as OpenLineage datasets (no Airflow run needed)."""

from __future__ import annotations

from airflow_provider_dltrain.operators import TrainModelOperator
from airflow_provider_dltrain.operators.openlineage import (
    dataset_naming,
    delta_dataset,
    input_datasets,
    registered_model_dataset,
    tracking_namespace,
)


def test_table_uris_follow_the_openlineage_naming_of_s3_and_local_files(tmp_path):
    assert dataset_naming("s3://lake-bucket/tables/digits/") == ("s3://lake-bucket", "tables/digits")
    assert dataset_naming(str(tmp_path / "digits")) == ("file", str(tmp_path / "digits"))
    assert dataset_naming(f"file://{tmp_path}/digits") == ("file", f"{tmp_path}/digits")


def test_a_delta_version_is_the_dataset_version_facet():
    dataset = delta_dataset("s3://b/t", 7)

    assert (dataset.namespace, dataset.name, dataset.facets["version"].datasetVersion) == ("s3://b", "t", "7")
    assert delta_dataset("s3://b/raw/2026-11-25.csv").facets == {}


def test_model_namespace_never_carries_the_tracking_uris_credentials():
    namespace = tracking_namespace("https://alice:s3cret@mlflow.example.com")
    model = registered_model_dataset("https://alice:s3cret@mlflow.example.com", "digits", 3)

    assert "s3cret" not in namespace and "alice" not in namespace
    assert (model.namespace, model.name, model.facets["version"].datasetVersion) == (
        "mlflow+https://mlflow.example.com",
        "models/digits",
        "3",
    )


def test_etl_inputs_keep_their_pinned_versions_and_raw_paths_have_none():
    datasets = input_datasets(
        {"events": {"uri": "s3://b/events", "version": 4, "timestamp": None}, "raw": "s3://b/landing/x.json"}
    )

    assert [(d.namespace, d.name, d.facets.get("version")) for d in datasets][1] == (
        "s3://b",
        "landing/x.json",
        None,
    )
    assert datasets[0].facets["version"].datasetVersion == "4"


def test_an_operator_that_returned_nothing_reports_no_datasets():
    op = TrainModelOperator(task_id="t", dataset={"uri": "/t", "version": 0}, train_fn="m:f")

    lineage = op.get_openlineage_facets_on_complete(None)

    assert lineage.inputs == [] and lineage.outputs == []
