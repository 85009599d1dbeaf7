"""ScoringSpec and model-spec validation: bad input is refused with the field named, before Spark starts."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.inference import ScoringSpec, check_model_spec


def test_scoring_spec_from_dict_normalises_lists_and_round_trips():
    raw = {"feature_columns": ["features"], "key_columns": ["id", "ds"], "batch_size": 50}
    spec = ScoringSpec.coerce(raw)
    assert spec.feature_columns == ("features",) and spec.key_columns == ("id", "ds")
    assert ScoringSpec.coerce(spec.to_dict()) == spec
    assert spec.output_columns == ("prediction", "score", "model_name", "model_version", "input_version")


def test_regression_spec_outputs_one_prediction_column():
    spec = ScoringSpec(feature_columns=("x1", "x2"), task="regression")
    assert spec.output_columns == ("prediction", "model_name", "model_version", "input_version")
    assert spec.prediction_ddl() == "prediction double"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"key_columns": ["id"]}, "feature_columns"),
        ({"feature_columns": []}, "feature_columns"),
        ({"feature_columns": ["f", "f"]}, "feature_columns"),
        ({"feature_columns": ["f"], "task": "ranking"}, "task"),
        ({"feature_columns": ["f"], "batch_size": 0}, "batch_size"),
        ({"feature_columns": ["f"], "torch_threads": -1}, "torch_threads"),
        ({"feature_columns": ["f"], "key_columns": ["prediction"]}, "key_columns"),
        ({"feature_columns": ["f"], "features": ["f"]}, "unknown keys"),
        (["features"], "scoring must be"),
    ],
)
def test_bad_scoring_spec_is_refused_naming_the_field(value, field):
    with pytest.raises(InvalidSpecError, match=field):
        ScoringSpec.coerce(value)


@pytest.mark.parametrize(
    "spec",
    ["models:/digits/3", "runs:/abc/model", {"name": "d", "alias": "champion"}, {"name": "d", "version": 1}],
)
def test_accepted_model_specs_pass_the_shape_check(spec):
    assert check_model_spec(spec) == spec


@pytest.mark.parametrize("spec", ["", "  ", 3, ["digits"], {"alias": "champion"}, {"name": ""}])
def test_malformed_model_spec_is_refused_naming_the_field(spec):
    with pytest.raises(InvalidSpecError, match=r"^model"):
        check_model_spec(spec)
