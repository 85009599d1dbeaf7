"""Code identity: the training module plus the modules of its own code base it imports, nothing else."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import textwrap

import pytest

from airflow_provider_dltrain.utils.hashing import MAX_TAG_CHARS, code_hash, code_identity, join_limited

FILES = {
    "src/mypkg/__init__.py": "",
    "src/mypkg/train.py": """
        import json
        import thirdparty
        from . import models
        from mypkg.data import loaders

        def train(ctx):
            return {"loss": models.scale() * loaders.rows() * thirdparty.FACTOR}

        def export():
            from mypkg import lazy  # imported when called only: hashing must not import it either
    """,
    "src/mypkg/lazy.py": "raise RuntimeError('hashing imported a lazily imported module')\n",
    "src/mypkg/models.py": """
        from .layers import WIDTH

        def scale():
            return WIDTH * 1.0
    """,
    "src/mypkg/layers.py": "WIDTH = 4\n",
    "src/mypkg/data/__init__.py": "",
    "src/mypkg/data/loaders.py": """
        def rows():
            from ..layers import WIDTH  # imports inside functions count too
            return WIDTH
    """,
    "src/mypkg/unrelated.py": "X = 1\n",
    "site-packages/thirdparty/__init__.py": "FACTOR = 2\n",
}


@pytest.fixture
def code_tree(tmp_path, monkeypatch):
    """Write ``FILES`` under fresh ``sys.path`` entries (src, site-packages, dags); forget them afterwards."""
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for entry in ("src", "site-packages", "dags"):
        (tmp_path / entry).mkdir(exist_ok=True)
        monkeypatch.syspath_prepend(str(tmp_path / entry))
    importlib.invalidate_caches()
    yield tmp_path
    for name in list(sys.modules):
        if name.split(".")[0] in {"mypkg", "thirdparty", "helpers"} or name.startswith("unusual_prefix_"):
            del sys.modules[name]


def _train():
    return importlib.import_module("mypkg.train").train


def test_code_hash_covers_the_training_module_and_every_package_module_it_imports_transitively(code_tree):
    identity = code_identity(_train())
    assert identity.modules == (
        "mypkg.data.loaders",
        "mypkg.layers",
        "mypkg.lazy",
        "mypkg.models",
        "mypkg.train",
    )
    assert "mypkg.lazy" not in sys.modules
    assert identity.tags()["dltrain.code_modules"] == ",".join(identity.modules)

    (code_tree / "src/mypkg/layers.py").write_text("WIDTH = 5\n")  # reached through models.py and loaders.py
    assert code_hash(_train()) != identity.hash


def test_code_hash_ignores_unrelated_package_modules_and_modules_outside_the_package(code_tree):
    before = code_hash(_train())
    (code_tree / "src/mypkg/unrelated.py").write_text("X = 2\n")
    (code_tree / "site-packages/thirdparty/__init__.py").write_text(
        "FACTOR = 3\n"
    )  # a dependency: the environment's job
    assert code_hash(_train()) == before


def test_a_dag_file_function_also_hashes_the_helper_modules_next_to_it(code_tree):
    (code_tree / "dags/helpers.py").write_text("LR = 0.1\n")
    dag = code_tree / "dags/my_dag.py"
    dag.write_text("import helpers\nimport thirdparty\n\ndef train(ctx):\n    return {'lr': helpers.LR}\n")
    # the synthetic module name Airflow gives a DAG file
    spec = importlib.util.spec_from_file_location("unusual_prefix_0123_my_dag", dag)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    identity = code_identity(module.train)
    assert identity.modules == ("helpers", "unusual_prefix_0123_my_dag")  # thirdparty lives elsewhere
    (code_tree / "dags/helpers.py").write_text("LR = 0.2\n")
    assert code_hash(module.train) != identity.hash


def test_a_code_version_replaces_the_source_hash_and_is_recorded(code_tree):
    identity = code_identity(_train(), code_version="git-1a2b3c")
    assert identity.hash == hashlib.sha256(b"code_version:git-1a2b3c").hexdigest()
    assert identity.tags() == {"dltrain.code_hash": identity.hash, "dltrain.code_version": "git-1a2b3c"}
    (code_tree / "src/mypkg/models.py").write_text("def scale():\n    return 0.0\n")
    assert code_hash(_train(), "git-1a2b3c") == identity.hash  # the user vouches for the code
    assert code_hash(_train(), "") == code_hash(_train())  # an empty rendered template means "hash it"


def test_a_function_without_a_module_file_still_gets_a_stable_hash_of_its_code():
    def cell(body: str):
        namespace = {"__name__": "dltrain_notebook_cell"}  # no module file, as in a REPL or notebook
        exec(f"def train(ctx):\n    return {body}\n", namespace)
        return namespace["train"]

    identity = code_identity(cell("{'a': 1.0}"))
    assert identity.modules == () and "dltrain.code_modules" not in identity.tags()
    assert identity.hash == code_hash(cell("{'a': 1.0}"))
    assert identity.hash != code_hash(cell("{'a': 2.0}"))


def test_a_long_module_list_is_cut_at_a_comma_under_mlflows_tag_limit():
    names = tuple(f"pkg.module_{i:04d}" for i in range(1000))
    text = join_limited(names, MAX_TAG_CHARS)
    assert len(text) <= MAX_TAG_CHARS
    kept = text.split(",")[:-1]
    assert kept == list(names[: len(kept)]) and text.endswith(f"...(+{len(names) - len(kept)} more)")
    assert join_limited(names[:3], MAX_TAG_CHARS) == ",".join(names[:3])


def test_training_runs_record_the_hashed_modules_or_the_given_code_version(digits_ref, tracking):
    from airflow_provider_dltrain.training import run_identity, run_training

    hashed = run_training("training_fns:keyless_train", digits_ref, {"epochs": 1}, tracking=tracking)
    named = run_training(
        "training_fns:keyless_train", digits_ref, {"epochs": 1}, tracking=tracking, code_version="v1.2"
    )
    tags = [tracking.client().get_run(r.run_id).data.tags for r in (hashed, named)]
    assert tags[0]["dltrain.code_modules"] == "training_fns" and "dltrain.code_version" not in tags[0]
    assert tags[1]["dltrain.code_version"] == "v1.2" and "dltrain.code_modules" not in tags[1]
    assert tags[1]["dltrain.code_hash"] == named.code_hash == hashlib.sha256(b"code_version:v1.2").hexdigest()
    assert (
        run_identity("training_fns:keyless_train", digits_ref, {"epochs": 1}, code_version="v1.2")[
            "dltrain.code_hash"
        ]
        == named.code_hash
    )
