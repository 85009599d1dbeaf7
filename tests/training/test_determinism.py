"""Same rows, code, hyper-parameters, seed and world size: bit-identical weights and metrics.

"Same rows" means the rows, not the files: the same 200 digits stored as one file, as three files
appended in another order (another table), and rewritten as two files in reverse order (a later
version of the first table) must train to the same bits.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from deltalake import write_deltalake
from training_digits import digits_partition

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.training import fingerprint, resolve, run_training
from airflow_provider_dltrain.training.loader import LoaderSpec, iter_batches

HPARAMS = {"epochs": 3, "batch_size": 16, "seed": 5}
TRAIN_FNS = ["training_fns:traced_demo_train", "training_fns:keyless_train"]  # split key / row hashes


@pytest.fixture(scope="module")
def same_rows(tmp_path_factory) -> list:
    """Three pinned versions holding the same 200 rows in 1, 3 and 2 files, each in another order."""
    rows = digits_partition(0, 9)
    root = tmp_path_factory.mktemp("same-rows")
    one_file, three_files = str(root / "one"), str(root / "three")
    write_deltalake(one_file, rows)
    for chunk in np.array_split(np.random.default_rng(1).permutation(rows.num_rows), 3):
        write_deltalake(three_files, rows.take(chunk), mode="append")
    backwards = rows.take(np.arange(rows.num_rows)[::-1])
    write_deltalake(one_file, backwards.slice(0, 120), mode="overwrite")  # version 1
    write_deltalake(one_file, backwards.slice(120), mode="append")  # version 2: all rows again
    refs = [lake.ref_at(one_file, 0), lake.ref_at(three_files, 2), lake.ref_at(one_file, 2)]
    assert [len(resolve(r).files) for r in refs] == [1, 3, 2]
    return refs


def test_the_same_rows_in_other_files_have_the_same_content_fingerprint(same_rows, tmp_path):
    assert len({fingerprint(ref) for ref in same_rows}) == 1
    rows = digits_partition(0, 9)
    labels = rows.column("label").to_pylist()
    labels[7] = (labels[7] + 1) % 10  # one value of one row
    changed = rows.set_column(rows.schema.get_field_index("label"), "label", pa.array(labels, pa.int64()))
    write_deltalake(str(tmp_path / "changed"), changed)
    assert fingerprint(lake.ref_at(str(tmp_path / "changed"), 0)) != fingerprint(same_rows[0])


@pytest.mark.parametrize("key", [None, "source_file", "label"])  # no key, unique key, key with ties
def test_batches_depend_on_the_rows_not_on_the_files_that_hold_them(same_rows, key):
    def order(ref) -> list[list[str]]:
        spec = LoaderSpec(resolve(ref), 16, ("source_file", "label"), key=key, seed=3, rank=1, world_size=2)
        return [batch["source_file"] for epoch in (0, 1) for batch in iter_batches(spec, epoch)]

    first, *others = [order(ref) for ref in same_rows]
    assert all(other == first for other in others)


def _rank_reports(run_dir: str) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in sorted(glob.glob(f"{run_dir}/ranks/rank-*.json"))]


@pytest.mark.parametrize("train_fn", TRAIN_FNS)
def test_local_training_on_the_same_rows_in_other_files_gives_bit_identical_weights_and_metrics(
    same_rows, train_fn
):
    results = [run_training(train_fn, ref, HPARAMS, tracking=False) for ref in same_rows]
    first = results[0]
    assert first.weights_sha256 and first.metrics
    for other in results[1:]:
        assert other.weights_sha256 == first.weights_sha256
        assert other.metrics == first.metrics  # exact, not approx
        assert other.data_fingerprint == first.data_fingerprint
    assert len({r["torch_threads"] for res in results for r in _rank_reports(res.run_dir)}) == 1
    assert not torch.are_deterministic_algorithms_enabled()  # the caller's setting is back


def test_a_different_seed_gives_different_weights(same_rows):
    one = run_training(TRAIN_FNS[1], same_rows[0], HPARAMS, tracking=False)
    other = run_training(TRAIN_FNS[1], same_rows[0], {**HPARAMS, "seed": 6}, tracking=False)
    assert one.weights_sha256 != other.weights_sha256


@pytest.mark.slow
def test_two_rank_ddp_on_the_same_rows_in_other_files_gives_bit_identical_weights_and_metrics(
    spark, same_rows
):
    runs = [
        run_training(
            "training_fns:traced_demo_train",
            ref,
            HPARAMS,
            backend="torch_distributor",
            backend_options={"num_processes": 2},
            tracking=False,
        )
        for ref in same_rows[:2]
    ]
    reports = [_rank_reports(run.run_dir) for run in runs]
    assert [r["rank"] for r in reports[0]] == [0, 1] == [r["rank"] for r in reports[1]]
    digests = {r["weights_sha256"] for rank_reports in reports for r in rank_reports}
    assert len(digests) == 1 and runs[0].weights_sha256 in digests  # both ranks, both runs
    assert runs[0].metrics == runs[1].metrics and runs[0].world_size == 2


def test_deterministic_kernels_are_on_inside_the_block_without_loading_inductor_and_restored_after():
    """The rank sets torch's deterministic flag without importing inductor (~1.5 s a rank); a
    training function that loads inductor itself (``torch.compile``) still gets deterministic code."""
    import os
    import subprocess
    import sys

    probe = """
import sys, torch
from airflow_provider_dltrain.training.rank_job import deterministic_torch
with deterministic_torch():
    assert torch.are_deterministic_algorithms_enabled()
    assert "torch._inductor.config" not in sys.modules, "inductor was imported"
    import torch._inductor.config as inductor
    assert inductor.deterministic is True
assert not torch.are_deterministic_algorithms_enabled() and inductor.deterministic is False
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
