"""A model version whose outputs are NaN or infinite is refused at scoring unless ``allow_non_finite``.

Model ``nan_digits`` v1 in the shared store: a linear classifier scaled by ``sqrt(features[0])``, so
every row with a negative first feature gets NaN logits. Spark local[2], real Delta tables.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from inference_helpers import DAYS, N_CLASSES, N_FEATURES, ROWS_PER_DAY, features

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError, NonFiniteError
from airflow_provider_dltrain.inference import ScoringSpec, resolve_scoring_model, score_table
from airflow_provider_dltrain.inference.worker import NON_FINITE, predict
from airflow_provider_dltrain.lake import DeltaLog, open_table

NAME = "nan_digits"
DAY, DAY_FILTER = {"ds": DAYS[1]}, [["ds", "=", DAYS[1]]]
X = features(ROWS_PER_DAY, 1)  # the rows of DAYS[1], ids ROWS_PER_DAY .. 2 * ROWS_PER_DAY - 1
NAN_IDS = {ROWS_PER_DAY + i for i in np.flatnonzero(X[:, 0] < 0)}


class SqrtScaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(N_FEATURES, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * torch.sqrt(x[:, :1])  # NaN where the first feature is negative


@pytest.fixture(scope="module")
def nan_model(store):
    import mlflow
    import mlflow.pytorch

    from airflow_provider_dltrain.store.config import ensure_experiment

    store.tracking.apply()
    mlflow.set_experiment(
        experiment_id=ensure_experiment(mlflow.MlflowClient(), "inference-tests", store.tracking.tracking_uri)
    )
    torch.manual_seed(0)
    with mlflow.start_run():
        mlflow.pytorch.log_model(
            SqrtScaled().eval(),
            name="model",
            input_example=np.abs(features(4, 0)),
            registered_model_name=NAME,
            serialization_format="pt2",
            pip_requirements=["torch"],
        )
    return resolve_scoring_model({"name": NAME, "version": 1}, store.tracking)


def _score(spark, store, model, input_ref, out, **scoring):
    spec = ScoringSpec(feature_columns=("features",), key_columns=("id",), batch_size=500, **scoring)
    return score_table(
        spark, model, input_ref, out, DAY, scoring=spec, tracking=store.tracking, input_filter=DAY_FILTER
    )


def test_the_worker_flags_rows_whose_output_is_not_finite():
    out = predict(
        lambda x: torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [float("inf"), 1.0]]),
        np.zeros((3, 4), np.float32),
        "classification",
    )
    assert out[NON_FINITE].tolist() == [False, True, True]
    regression = predict(
        lambda x: torch.tensor([1.0, float("-inf")]), np.zeros((2, 4), np.float32), "regression"
    )
    assert regression[NON_FINITE].tolist() == [False, True]


@pytest.mark.parametrize("udf", ["arrow", "pandas"])
def test_nan_outputs_are_refused_naming_the_version_and_the_count_and_nothing_is_committed(
    spark, store, nan_model, input_table, tmp_path, udf
):
    assert 0 < len(NAN_IDS) < ROWS_PER_DAY
    out = tmp_path / "scores"
    with pytest.raises(NonFiniteError) as caught:
        _score(spark, store, nan_model, input_table, str(out), udf=udf)
    message = str(caught.value)
    assert isinstance(caught.value, DltrainUserError)  # not retried
    assert f"model '{NAME}' version 1" in message
    assert f"for {len(NAN_IDS)} of {ROWS_PER_DAY} row(s)" in message
    assert "nothing was committed" in message and "allow_non_finite=True" in message
    sample = int(message.split("the row with id=", 1)[1].split(")", 1)[0])
    assert sample in NAN_IDS
    assert DeltaLog(str(out)).latest_version() is None
    assert not out.exists() and not (tmp_path / "scores_quarantine").exists()


def test_allowed_nan_outputs_are_written(spark, store, nan_model, input_table, tmp_path):
    out = str(tmp_path / "scores")
    _score(spark, store, nan_model, input_table, out, allow_non_finite=True)
    table = open_table(out).to_pyarrow_table()
    assert table.num_rows == ROWS_PER_DAY and NON_FINITE not in table.column_names
    ids, scores = table.column("id").to_pylist(), table.column("score").to_numpy()
    assert {i for i, s in zip(ids, scores, strict=True) if np.isnan(s)} == NAN_IDS


def test_allow_non_finite_must_be_a_bool():
    with pytest.raises(InvalidSpecError, match="allow_non_finite"):
        ScoringSpec.coerce({"feature_columns": ["features"], "allow_non_finite": "yes"})
    assert ScoringSpec.coerce(
        json.loads('{"feature_columns": ["f"], "allow_non_finite": true}')
    ).allow_non_finite
