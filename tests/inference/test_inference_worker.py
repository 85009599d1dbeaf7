"""The executor-side scoring functions, called in-process (no Spark): features, outputs, secrets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from airflow_provider_dltrain.exceptions import SchemaMismatchError
from airflow_provider_dltrain.inference import ScoringModel, ScoringSpec
from airflow_provider_dltrain.inference.scoring import worker_config
from airflow_provider_dltrain.inference.worker import features_matrix, predict
from airflow_provider_dltrain.store.config import TrackingConfig


def test_scalar_and_array_feature_columns_are_concatenated_in_spec_order():
    arrays = pd.Series([np.array([1.0, 2.0]), np.array([3.0, 4.0])], dtype=object)
    scalars = pd.Series([5, 6])
    x = features_matrix([scalars, arrays], ["age", "pixels"])
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, [[5, 1, 2], [6, 3, 4]])


def test_null_feature_is_refused_naming_the_column():
    with pytest.raises(SchemaMismatchError, match="'age' has null"):
        features_matrix([pd.Series([1.0, None])], ["age"])


def test_ragged_feature_arrays_are_refused_naming_the_column():
    ragged = pd.Series([np.array([1.0, 2.0]), np.array([3.0])], dtype=object)
    with pytest.raises(SchemaMismatchError, match="'pixels' has arrays of different lengths"):
        features_matrix([ragged], ["pixels"])


def test_classification_predicts_argmax_with_its_softmax_probability():
    logits = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    out = predict(lambda x: logits, np.zeros((2, 4), np.float32), "classification")
    assert out["prediction"].tolist() == [1, 0]
    np.testing.assert_allclose(out["score"], torch.softmax(logits, 1).max(1).values.numpy(), rtol=1e-6)


def test_single_logit_classification_is_binary_with_sigmoid_confidence():
    out = predict(lambda x: torch.tensor([[2.0], [-1.0]]), np.zeros((2, 4), np.float32), "classification")
    assert out["prediction"].tolist() == [1, 0]
    np.testing.assert_allclose(
        out["score"], [torch.sigmoid(torch.tensor(2.0)), torch.sigmoid(torch.tensor(1.0))]
    )


def test_regression_returns_one_float_per_row_and_refuses_several_outputs():
    out = predict(lambda x: torch.tensor([[1.5], [2.5]]), np.zeros((2, 4), np.float32), "regression")
    assert out["prediction"].tolist() == [1.5, 2.5] and out["prediction"].dtype == np.float64
    with pytest.raises(SchemaMismatchError, match=r"\(N,\) or \(N, 1\)"):
        predict(lambda x: torch.zeros(2, 3), np.zeros((2, 4), np.float32), "regression")


def test_worker_config_carries_credentials_as_environment_never_in_its_repr():
    tracking = TrackingConfig(tracking_uri="http://mlflow:5000", env={"MLFLOW_TRACKING_PASSWORD": "s3cr3t"})
    cfg = worker_config(ScoringModel("digits", 1, "models:/digits/1"), ScoringSpec(("f",)), tracking)
    assert cfg.env == {"MLFLOW_TRACKING_PASSWORD": "s3cr3t"}
    assert "s3cr3t" not in repr(cfg)
