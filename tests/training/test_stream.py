"""The streaming loader: bounded memory, every row once per epoch, disjoint ranks, content-determined order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from deltalake import WriterProperties, write_deltalake

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.training import resolve
from airflow_provider_dltrain.training.loader import (
    DeltaLoader,
    LoaderSpec,
    iter_batches,
    num_rows,
    resolve_mode,
    units_of,
)
from airflow_provider_dltrain.training.stream import ShuffleBuffer

ROWS, GROUP = 2_000, 50  # 40 row groups per copy of the rows


def _rows(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    features = rng.random((ROWS, 8), dtype=np.float32)
    return pa.table(
        {
            "key": [f"row-{i:05d}" for i in range(ROWS)],
            "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 8),
            "label": pa.array(rng.integers(0, 10, ROWS)),
            "part": pa.array(["a" if i % 3 else "b" for i in range(ROWS)]),
        }
    )


def _write(uri: str, table: pa.Table) -> None:
    props = WriterProperties(max_row_group_size=GROUP)
    write_deltalake(uri, table, partition_by=["part"], writer_properties=props)


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, object]:
    """The same rows written twice (other file names), and a third table with other rows."""
    root = tmp_path_factory.mktemp("stream")
    _write(str(root / "first"), _rows())
    _write(str(root / "again"), _rows())  # the same row groups, in files with other (random) names
    _write(str(root / "other"), _rows(seed=1))
    return {name: resolve({"uri": str(root / name), "version": 0}) for name in ("first", "again", "other")}


def _spec(plan, **kw) -> LoaderSpec:
    values = {
        "batch_size": 16,
        "columns": ("key", "features", "label", "part"),
        "seed": 3,
        "mode": "stream",
        "shuffle_buffer_mb": 0.01,  # ~10 KB: about 170 rows, a twelfth of the table
    }
    values.update(kw)
    return LoaderSpec(plan=plan, **values)


def _keys(spec: LoaderSpec, epoch: int = 0, **kw) -> list[str]:
    return [k for batch in iter_batches(spec, epoch, **kw) for k in batch["key"]]


def test_the_survey_finds_every_row_group_and_the_buffer_is_far_smaller_than_the_table(plans):
    spec = _spec(plans["first"])
    units = units_of(spec)
    assert len(units) >= ROWS // GROUP and sum(u.rows for u in units) == ROWS
    assert max(u.rows for u in units) <= GROUP
    table_bytes = plans["first"].dataset().to_table(columns=list(spec.columns)).nbytes
    assert spec.buffer_bytes * 10 < table_bytes


@pytest.mark.parametrize(("world", "split"), [(1, None), (2, "train"), (3, "validation"), (2, None)])
def test_ranks_stream_disjoint_rows_covering_the_split_once_per_epoch_in_equal_steps(plans, world, split):
    base = {"split": split, "key": "key" if split else None}
    total = num_rows(_spec(plans["first"], **base))
    for epoch in range(2):
        per_rank = [
            _keys(_spec(plans["first"], rank=r, world_size=world, **base), epoch) for r in range(world)
        ]
        steps = {
            len(list(iter_batches(_spec(plans["first"], rank=r, world_size=world, **base), epoch)))
            for r in range(world)
        }
        assert len(steps) == 1  # DDP all-reduces once per step on every rank
        every = [k for keys in per_rank for k in keys]
        assert len(every) == len(set(every)) == total
    if split == "validation":
        assert 0 < total < ROWS


def test_ranks_read_disjoint_row_groups_except_at_their_boundaries(plans, monkeypatch):
    from airflow_provider_dltrain.training import stream

    read: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    real = stream.read_unit
    for rank in range(2):
        monkeypatch.setattr(
            stream, "read_unit", lambda p, f, g, c, r=rank: read[r].append((f, g)) or real(p, f, g, c)
        )
        list(iter_batches(_spec(plans["first"], rank=rank, world_size=2), 0))
    assert len(set(read[0]) & set(read[1])) <= 1  # the group straddling the two ranges
    assert len(set(read[0]) | set(read[1])) == len(units_of(_spec(plans["first"])))


def test_two_dataloader_workers_split_a_rank_and_yield_its_batches_once(plans):
    spec = _spec(plans["first"], rank=1, world_size=2)
    loader = DeltaLoader(spec, num_workers=2)
    keys = [k for batch in loader for k in batch["key"]]
    assert len(keys) == len(set(keys)) == len([k for b in iter_batches(spec, 0) for k in b["key"]])
    assert len(loader) == len(list(iter_batches(spec, 0)))


def test_order_is_a_function_of_seed_epoch_and_row_group_content_not_of_file_names(plans):
    first, again, other = (_keys(_spec(plans[name])) for name in ("first", "again", "other"))
    assert {f.path for f in plans["first"].files}.isdisjoint({f.path for f in plans["again"].files})
    assert first == again == _keys(_spec(plans["first"]))
    assert first != _keys(_spec(plans["first"]), epoch=1)
    assert first != _keys(_spec(plans["first"], seed=4))
    assert sorted(first) == sorted(other) and first != other  # same keys, other content: other order


def test_batches_hold_the_same_tensors_for_the_same_content(plans):
    a = list(iter_batches(_spec(plans["first"]), 0))
    b = list(iter_batches(_spec(plans["again"]), 0))
    assert a[0]["features"].shape == (16, 8) and a[0]["label"].dtype == torch.int64
    assert all(
        torch.equal(x["features"], y["features"]) and x["part"] == y["part"]
        for x, y in zip(a, b, strict=True)
    )


def test_shuffle_false_streams_the_row_groups_in_content_order(plans):
    keys = _keys(_spec(plans["first"], shuffle=False))
    assert len(keys) == ROWS and keys == _keys(_spec(plans["again"], shuffle=False))


def test_the_shuffle_buffer_never_holds_more_than_its_capacity_plus_one_piece():
    rng = np.random.default_rng(0)
    buffer = ShuffleBuffer(capacity=4_000, rng=rng)
    seen = []
    for start in range(0, 10_000, 100):  # 100 pieces of 100 rows x 8 bytes = 800 bytes each
        piece = {"x": torch.arange(start, start + 100, dtype=torch.int64)}
        for block in buffer.add(piece, 800):
            seen.append(block["x"])
    seen.extend(block["x"] for block in buffer.flush())
    values = torch.cat(seen)
    assert sorted(values.tolist()) == list(range(10_000))  # every row once
    assert not torch.equal(values, torch.arange(10_000))  # and mixed
    assert buffer.peak <= 4_000 + 2 * 800


def _feature_table(uri: str, rows: int, group: int) -> int:
    """A table of 256-float rows (1 KB each) in row groups of ``group`` rows; returns its decoded bytes."""
    features = np.random.default_rng(0).random((rows, 256), dtype=np.float32)
    table = pa.table({"features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), 256)})
    write_deltalake(uri, table, writer_properties=WriterProperties(max_row_group_size=group))
    return table.nbytes


def test_streaming_a_table_ten_times_the_buffer_keeps_peak_memory_near_the_buffer(tmp_path):
    """Peak RSS in a fresh process, after a warm-up pass: about the buffer when streaming, the table in memory."""
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    warm, big = str(tmp_path / "warm"), str(tmp_path / "big")
    _feature_table(warm, 2_000, 500)
    table_bytes = _feature_table(big, 12_000, 250)  # 12 MB decoded, row groups of 0.25 MB
    buffer_mb = 1.0
    assert table_bytes >= 10 * buffer_mb * 2**20
    plans = tmp_path / "plans.pickle"
    plans.write_bytes(pickle.dumps([resolve({"uri": uri, "version": 0}) for uri in (warm, big)]))
    probe = str(Path(__file__).with_name("stream_rss.py"))
    growth = {}
    for mode in ("stream", "memory"):
        out = subprocess.run(
            [sys.executable, probe, str(plans), mode, str(buffer_mb)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert int(out[0]) == 12_000
        growth[mode] = int(out[1])
    assert growth["memory"] > table_bytes  # the test can fail: holding the table shows up
    assert growth["stream"] < 2 * buffer_mb * 2**20 + 3 * 2**20, growth  # + row groups in flight, stacks


def test_auto_mode_keeps_a_selection_that_fits_in_memory_and_streams_one_that_does_not(plans):
    assert resolve_mode(_spec(plans["first"], mode="auto")).mode == "memory"
    assert resolve_mode(_spec(plans["first"], mode="auto", memory_budget_mb=0.01)).mode == "stream"
    assert resolve_mode(_spec(plans["first"], mode="memory", memory_budget_mb=0.01)).mode == "memory"


def test_memory_and_stream_modes_deal_the_same_rows(plans):
    for split in (None, "train"):
        kw = {"split": split, "key": "key" if split else None, "shuffle": False}
        memory = sorted(_keys(_spec(plans["first"], mode="memory", **kw)))
        assert memory == sorted(_keys(_spec(plans["first"], **kw)))


@pytest.mark.parametrize(("field", "value"), [("mode", "fast"), ("shuffle_buffer_mb", 0)])
def test_a_bad_mode_or_buffer_size_is_refused_naming_it(plans, field, value):
    with pytest.raises(InvalidSpecError, match=field):
        resolve_mode(_spec(plans["first"], **{field: value}))


def test_a_data_filter_selects_rows_inside_row_groups_when_streaming(tmp_path, plans):
    plan = resolve({"uri": plans["first"].ref.uri, "version": 0}, [["label", "<", "5"], ["part", "=", "a"]])
    batches = list(iter_batches(_spec(plan), 0))
    labels = torch.cat([b["label"] for b in batches])
    parts = {p for b in batches for p in b["part"]}
    assert parts == {"a"} and int(labels.max()) < 5
    assert len(labels) == num_rows(_spec(plan)) == num_rows(_spec(plan, mode="memory"))
    assert next(iter_batches(_spec(plan), 0))["key"] == batches[0]["key"]  # stopping early is fine


def test_the_training_context_passes_mode_and_buffer_to_the_loader(plans, tmp_path):
    from airflow_provider_dltrain.training import TrainContext

    ctx = TrainContext(plan=plans["first"], hparams={}, checkpoint_dir=str(tmp_path))
    loader = ctx.dataloader(16, columns=["key", "label"], mode="stream", shuffle_buffer_mb=0.01)
    assert loader.spec.mode == "stream" and loader.spec.buffer_bytes == int(0.01 * 2**20)
    assert sum(len(b["key"]) for b in loader) == ROWS == ctx.rows_seen["all"]
    assert ctx.dataloader(16, columns=["label"]).spec.mode == "memory"  # auto: 2,000 rows fit
