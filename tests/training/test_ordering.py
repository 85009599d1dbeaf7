"""The content order: the same rows give the same sequence however they are stored or permuted."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dltrain.training.ordering import content_order, sample_keys


def _tensor_table(features: np.ndarray, labels: np.ndarray, strings: list[str] | None = None) -> pa.Table:
    width = features.shape[1]
    columns = {
        "features": pa.FixedSizeListArray.from_arrays(pa.array(features.ravel()), width).cast(
            pa.list_(pa.from_numpy_dtype(features.dtype))
        ),
        "label": pa.array(labels),
    }
    if strings is not None:
        columns["path"] = pa.array(strings)
    return pa.table(columns)


def _ordered_rows(table: pa.Table) -> list[tuple]:
    order = content_order(table)
    assert sorted(order.tolist()) == list(range(table.num_rows))  # a permutation of the rows
    rows = table.take(order).to_pylist()
    return [tuple((k, str(v)) for k, v in sorted(row.items())) for row in rows]


def _restored(table: pa.Table, seed: int, pieces: int) -> pa.Table:
    """The same rows, shuffled and held in ``pieces`` chunks (as a scan of other files returns them)."""
    shuffled = table.take(np.random.default_rng(seed).permutation(table.num_rows))
    bounds = np.linspace(0, table.num_rows, pieces + 1).astype(int)
    return pa.concat_tables([shuffled.slice(a, b - a) for a, b in itertools.pairwise(bounds)])


def _images(rows: int) -> np.ndarray:
    """8x8 'images' with a blank border and few grey levels: many rows tie inside any one window."""
    rng = np.random.default_rng(3)
    images = np.zeros((rows, 8, 8), dtype=np.float32)
    images[:, 2:6, 2:6] = rng.integers(0, 3, (rows, 4, 4))
    return images.reshape(rows, 64)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: _tensor_table(np.random.default_rng(0).random((500, 64), np.float32), np.arange(500) % 7),
            id="random",
        ),
        pytest.param(lambda: _tensor_table(_images(500), np.arange(500) % 10), id="images-with-ties"),
        pytest.param(
            lambda: _tensor_table(_images(300), np.zeros(300, np.int64), [f"f{i % 120}" for i in range(300)]),
            id="ties-broken-only-by-a-string",
        ),
        pytest.param(lambda: pa.table({"path": [f"p{i % 50}" for i in range(200)]}), id="strings-only"),
        pytest.param(
            lambda: _tensor_table(
                np.random.default_rng(5).random((300, 40)).astype(np.float16), np.arange(300)
            ),
            id="float16",
        ),
        pytest.param(
            lambda: _tensor_table(np.random.default_rng(1).random((400, 3)), np.arange(400) % 2),
            id="float64-width-3",
        ),
        pytest.param(
            lambda: _tensor_table(
                np.random.default_rng(2).integers(0, 4, (400, 40)).astype(np.int16), np.arange(400)
            ),
            id="int16",
        ),
    ],
)
def test_the_same_rows_in_another_order_and_other_chunks_come_out_in_the_same_sequence(make):
    table = make()
    expected = _ordered_rows(table)
    for seed, pieces in ((1, 1), (2, 3), (3, 7)):
        assert _ordered_rows(_restored(table, seed, pieces)) == expected


def test_rows_alike_in_the_sampled_window_are_still_ordered_by_their_whole_content():
    # every row has the same middle cache line; they differ only at the start of the tensor
    features = np.zeros((64, 64), dtype=np.float32)
    features[:, 0] = np.arange(64)
    table = _tensor_table(features, np.zeros(64, np.int64))
    assert len(set(sample_keys(table).tolist())) == 1  # the window alone cannot tell them apart
    assert _ordered_rows(_restored(table, 5, 4)) == _ordered_rows(table)


def test_negative_zero_and_nan_payloads_order_like_the_values_they_stand_for():
    features = np.random.default_rng(4).random((50, 16), dtype=np.float32)
    features[:10, 8] = 0.0
    features[10:20, 8] = np.nan
    other = features.copy()
    other[:10, 8] = -0.0
    bits = other.view(np.uint32)
    bits[10:20, 8] = 0xFFC00123  # a negative NaN with a payload
    labels = np.arange(50)
    assert np.array_equal(
        content_order(_tensor_table(features, labels)), content_order(_tensor_table(other, labels))
    )
