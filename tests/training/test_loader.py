"""The Delta -> PyTorch loader: pinned versions, filters, sharding, shuffling, splits, tensors."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
import torch
from deltalake import write_deltalake
from training_digits import DAYS, digits_partition, write_digits

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError
from airflow_provider_dltrain.training import fingerprint, rank_slices, resolve, step_layout
from airflow_provider_dltrain.training.loader import DeltaLoader, LoaderSpec, iter_batches, num_rows

N_DIGITS = 1797


def _spec(plan, **kw) -> LoaderSpec:
    values = {"batch_size": 16, "columns": ("label", "source_file"), "split": None, "key": None, "seed": 7}
    values.update(kw)
    return LoaderSpec(plan=plan, **values)


def _keys(spec: LoaderSpec, epoch: int, **kw) -> list[str]:
    return [k for batch in iter_batches(spec, epoch, **kw) for k in batch["source_file"]]


@pytest.mark.parametrize(
    ("rows", "batch", "world"),
    [(100, 8, 2), (97, 8, 2), (17, 8, 2), (33, 4, 3), (5, 1, 2), (64, 32, 2), (1, 4, 2)],
)
def test_every_rank_runs_the_same_number_of_steps_and_every_row_is_dealt_exactly_once(rows, batch, world):
    per_rank = [rank_slices(rows, batch, r, world) for r in range(world)]
    assert len({len(s) for s in per_rank}) == 1  # DDP all-reduces once per step on every rank
    covered = sorted(i for slices in per_rank for start, stop in slices for i in range(start, stop))
    assert covered == list(range(rows))
    assert sum(step_layout(rows, batch, world)) == rows
    if batch > 1 and rows >= world:  # nobody gets an empty batch unless that is unavoidable
        assert all(stop > start for slices in per_rank for start, stop in slices)


def test_two_ranks_and_two_workers_each_see_disjoint_rows_covering_the_split_once_per_epoch(digits_ref):
    plan = resolve(digits_ref)
    seen: dict[tuple[int, int], list[str]] = {}
    for rank, epoch in itertools.product(range(2), range(2)):
        spec = _spec(plan, split="train", key="source_file", rank=rank, world_size=2)
        loader = DeltaLoader(spec, num_workers=2)
        loader.set_epoch(epoch)
        seen[rank, epoch] = [k for batch in loader for k in batch["source_file"]]
    train_rows = num_rows(_spec(plan, split="train", key="source_file"))
    for epoch in range(2):
        rank0, rank1 = seen[0, epoch], seen[1, epoch]
        assert not set(rank0) & set(rank1)
        assert len(rank0) + len(rank1) == len(set(rank0) | set(rank1)) == train_rows
    assert seen[0, 0] != seen[0, 1]  # reshuffled per epoch


def test_shuffle_is_a_function_of_seed_and_epoch_only(digits_ref):
    spec = _spec(resolve(digits_ref))
    assert _keys(spec, 3) == _keys(spec, 3)
    assert _keys(spec, 3) != _keys(spec, 4)
    assert _keys(spec, 3) != _keys(_spec(resolve(digits_ref), seed=8), 3)
    unshuffled = _keys(_spec(resolve(digits_ref), shuffle=False), 0)
    assert unshuffled == _keys(_spec(resolve(digits_ref), shuffle=False), 5)


def test_two_ranks_get_the_global_batches_one_process_gets_with_double_batch_size(digits_ref):
    plan = resolve(digits_ref)
    single = [b["source_file"] for b in iter_batches(_spec(plan, batch_size=32), 0)]
    ranks = [[b["source_file"] for b in iter_batches(_spec(plan, rank=r, world_size=2), 0)] for r in range(2)]
    assert len(single) == len(ranks[0]) == len(ranks[1])
    for step, batch in enumerate(single):
        assert sorted(batch) == sorted(ranks[0][step] + ranks[1][step])


def test_validation_split_is_decided_by_the_row_key_so_new_partitions_do_not_move_old_rows(tmp_path):
    uri = str(tmp_path / "digits")
    v_small = write_digits(uri, DAYS[:2])  # 2 days
    lake.overwrite_partition(uri, digits_partition(2, 2), {"ds": "2026-11-30"})  # a later day arrives
    v_big = lake.latest(uri)

    def split_keys(ref, split):
        return set(_keys(_spec(resolve(ref), split=split, key="source_file", validation_fraction=0.25), 0))

    small_val, big_val = split_keys(v_small, "validation"), split_keys(v_big, "validation")
    small_train = split_keys(v_small, "train")
    assert small_val and small_val <= big_val and not small_train & big_val
    assert not small_val & small_train
    assert 0.18 < len(small_val) / (len(small_val) + len(small_train)) < 0.32


def test_loader_reads_exactly_the_pinned_version_not_the_latest(digits_ref):
    first_two_days = lake.ref_at(digits_ref.uri, 1)
    rows = num_rows(_spec(resolve(first_two_days)))
    assert rows == len(digits_partition(0, 4)) + len(digits_partition(1, 4))
    assert num_rows(_spec(resolve(digits_ref))) == N_DIGITS


def test_partition_filter_prunes_files_and_data_filter_prunes_rows(digits_ref):
    by_day = resolve(digits_ref, [["ds", "<=", DAYS[1]]])
    assert len(by_day.files) == 2 and all(dict(f.partition)["ds"] <= DAYS[1] for f in by_day.files)
    by_label = resolve(
        digits_ref, [["ds", "<=", DAYS[1]], ["label", "<", "3"]]
    )  # rendered templates are text
    labels = torch.cat([b["label"] for b in iter_batches(_spec(by_label), 0)])
    assert len(by_label.files) == 2 and int(labels.max()) < 3 and len(labels) > 100
    either = resolve(digits_ref, [[["ds", "=", DAYS[0]]], [["ds", "=", DAYS[3]]]])  # OR of two conjunctions
    assert sorted(dict(f.partition)["ds"] for f in either.files) == [DAYS[0], DAYS[3]]


def test_a_filter_on_an_unknown_column_or_with_a_bad_operator_names_the_problem(digits_ref):
    with pytest.raises(InvalidSpecError, match="'dss'"):
        resolve(digits_ref, [["dss", "<=", "2026-11-28"]])
    with pytest.raises(InvalidSpecError, match="'=<'"):
        resolve(digits_ref, [["ds", "=<", "2026-11-28"]])
    with pytest.raises(InvalidSpecError, match="'label'"):
        resolve(digits_ref, [["label", "<", "three"]])


def test_fingerprint_is_the_same_when_the_same_files_are_selected_from_a_newer_version(digits_ref):
    cutoff = [["ds", "<=", DAYS[2]]]
    at_v2 = fingerprint(lake.ref_at(digits_ref.uri, 2), cutoff)
    assert at_v2 == fingerprint(digits_ref, cutoff)  # day 4 added later: same bytes for this cut-off
    assert at_v2 != fingerprint(digits_ref)
    assert fingerprint(digits_ref, cutoff) != fingerprint(digits_ref, [*cutoff, ["label", "<", 5]])


def test_fingerprint_follows_the_rows_of_a_rewritten_partition_not_its_files(tmp_path):
    uri = str(tmp_path / "digits")
    before = write_digits(uri, DAYS[:2])
    rows = digits_partition(1, 2)
    rows = rows.take(list(range(rows.num_rows))[::-1]).append_column(
        "ds", pa.array([DAYS[1]] * rows.num_rows)
    )
    # the same rows in reverse order and new files, by another writer (no digest in its commit)
    write_deltalake(uri, rows, mode="overwrite", predicate=f"ds = '{DAYS[1]}'")
    same = lake.ref_at(uri, before.version + 1)
    assert resolve(same).files != resolve(before).files
    assert fingerprint(same) == fingerprint(before)
    fewer = lake.overwrite_partition(uri, digits_partition(1, 2).slice(1), {"ds": DAYS[1]})  # one row less
    assert fingerprint(fewer) != fingerprint(before)


def test_list_columns_become_dense_tensors_and_ragged_lists_are_refused(tmp_path, digits_ref):
    batch = next(iter_batches(_spec(resolve(digits_ref), columns=("features", "label")), 0))
    assert batch["features"].dtype == torch.float32 and batch["features"].shape == (16, 64)
    assert batch["label"].dtype == torch.int64 and float(batch["features"].max()) <= 1.0

    uri = str(tmp_path / "ragged")
    images = pa.array(
        [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]], type=pa.list_(pa.list_(pa.float32()))
    )
    ref = lake.overwrite_partition(uri, pa.table({"image": images, "id": ["a", "b"]}), {"ds": DAYS[0]})
    nested = next(iter_batches(_spec(resolve(ref), columns=("image",), shuffle=False), 0))
    assert nested["image"].shape == (2, 2, 2) and nested["image"][1, 1, 0] == 6.0
    ragged = pa.table({"image": pa.array([[[0.0]], [[1.0, 2.0]]], type=images.type), "id": ["c", "d"]})
    ref = lake.overwrite_partition(uri, ragged, {"ds": DAYS[1]})
    with pytest.raises(SchemaMismatchError, match="'image'"):
        list(iter_batches(_spec(resolve(ref, [["ds", "=", DAYS[1]]]), columns=("image",)), 0))


def test_each_pass_over_the_loader_is_the_next_epoch_and_len_counts_this_ranks_batches(digits_ref):
    loader = DeltaLoader(_spec(resolve(digits_ref), rank=1, world_size=2))
    first = [k for b in loader for k in b["source_file"]]
    second = [k for b in loader for k in b["source_file"]]
    assert first == _keys(loader.spec, 0) and second == _keys(loader.spec, 1)
    assert len(loader) == len(rank_slices(N_DIGITS, 16, 1, 2))
