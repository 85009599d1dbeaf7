"""The docs' code is code that runs: every example file they include loads (the DAGs with the tasks the
pages show), the README's DAG parses, every path and variable they cite exists. ``make docs`` (mkdocs
--strict) checks links, anchors, snippet files and the API reference."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
PAGES = sorted(DOCS.rglob("*.md"))
README = REPO / "README.md"

# every DAG of docs/examples and its tasks: a page shows them, so a change here is a change there
EXAMPLE_DAGS = {
    "docs_nightly": {"ingest_images", "wait_for_partition", "train", "register", "score", "lineage"},
    "on_new_events": {"process"},
    "docs_gate_policy": {"register", "register_on_loss"},
    "digits_search": {"wait_for_partition", "trials", "train", "select_best", "register"},
    "digits_optuna": {"wait_for_partition", "trials", "train"},
    "docs_glue": {"ingest_images"},
    "docs_emr": {"ingest_images"},
    "docs_emr_serverless": {"score"},
    "docs_spark_submit": {"ingest_images"},
    "docs_sagemaker_processing": {"ingest_images"},
    "docs_ec2_stage": {"score"},
    "docs_sagemaker": {"train"},
    "docs_ec2": {"train", "ec2_teardown"},
    "docs_ray": {"train"},
    "docs_kubeflow": {"train"},
    "docs_reap": {"ingest", "score", "reap"},
    "points_nightly": {"ingest", "train"},
    "points_chain": {"ingest", "wait_for_partition", "train", "register", "score"},
    "docs_wandb": {"train"},
    "docs_dvc": {"ingest"},
}
# example files that are not DAGs: imported (functions a notebook or a job calls, a conftest)
MODULES = ["train_function.py", "transform.py", "notebook_training.py", "local_ray_fake_aws.py",
           "conftest_ray.py", "points/etl.py", "points/model.py", "notebook_kubeflow.py"]  # fmt: skip
SNIPPET = re.compile(r'--8<-- "([^"]+)"')
# names that hold DLTRAIN_ but are no setting: heredoc delimiters and a log line's mark
NOT_SETTINGS = {"DLTRAIN_PLAN", "DLTRAIN_NODE", "DLTRAIN_WORKER_ERROR"}
USER_FILES = {"docker/stack/.env"}  # what the reader creates (git-ignored)


def test_every_example_dag_loads_without_errors_with_the_tasks_the_pages_show():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert not bag.import_errors, bag.import_errors
    assert {d: set(bag.dags[d].task_ids) for d in bag.dags} == EXAMPLE_DAGS


@pytest.mark.parametrize("name", MODULES)
def test_every_other_example_imports(name, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # points/model.py is imported as the package's module
    spec = importlib.util.spec_from_file_location(f"docs_example_{Path(name).stem}", EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop(spec.name, None)


def test_the_readme_is_one_page_and_its_dag_parses_with_its_tasks(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    text = README.read_text()
    assert len(text.splitlines()) <= 200
    (dag_code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (tmp_path / "readme_dag.py").write_text(dag_code)
    bag = DagBag(dag_folder=str(tmp_path))
    assert not bag.import_errors, bag.import_errors
    ((dag_id, dag),) = bag.dags.items()
    assert set(dag.task_ids) == {"ingest", "wait_for_partition", "train", "register", "score"}, dag_id


def test_every_snippet_names_a_file_and_a_section_that_exist():
    missing = []
    for page in PAGES:
        for ref in SNIPPET.findall(page.read_text()):
            path, _, section = ref.partition(":")
            target = REPO / path
            if not target.is_file():
                missing.append(f"{page.name}: {path}")
            elif section and f"--8<-- [start:{section}]" not in target.read_text():
                missing.append(f"{page.name}: {path} has no section {section!r}")
    assert not missing, missing


def test_every_repository_path_the_docs_and_the_readme_cite_exists():
    cited = re.compile(
        r"`((?:airflow_provider_dltrain|tests|dags|docker|benchmarks|docs|constraints)/[\w./-]*)`"
    )
    missing = []
    for page in [README, *PAGES]:
        for path in cited.findall(page.read_text()):
            if path not in USER_FILES and not (REPO / path.rstrip("/")).exists():
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert not missing, missing


def test_the_configuration_page_has_every_variable_the_package_and_the_dags_read():
    names = set()
    for root in ("airflow_provider_dltrain", "dags"):
        for path in (REPO / root).rglob("*.py"):
            names |= set(re.findall(r"\bDLTRAIN_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    table = (DOCS / "configuration.md").read_text()
    assert sorted(n for n in names - NOT_SETTINGS if f"`{n}`" not in table) == []
