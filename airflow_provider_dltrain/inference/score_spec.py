"""What to score and how: the feature and key columns, the task kind and the Arrow batch size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

TASKS = ("classification", "regression")
UDFS = ("arrow", "pandas")
# Columns every scored row gets besides its key columns and the predictions.
MODEL_NAME, MODEL_VERSION, INPUT_VERSION = "model_name", "model_version", "input_version"
PREDICTION, SCORE = "prediction", "score"


def _names(value: object, field: str, *, allow_empty: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise InvalidSpecError(f"scoring.{field} must be a list of column names, got {value!r:.120}")
    if not value and not allow_empty:
        raise InvalidSpecError(f"scoring.{field} is empty: name at least one column, e.g. ['features']")
    if len(set(value)) != len(value):
        raise InvalidSpecError(f"scoring.{field} names a column twice: {list(value)}")
    return tuple(value)


@dataclass(frozen=True)
class ScoringSpec:
    """How rows become model input and what the output rows hold.

    :param feature_columns: numeric or ``array<numeric>`` columns, concatenated in this order
        into the model's float input ``(N, F)``.
    :param key_columns: columns copied unchanged to every output row (e.g. the record id).
    :param task: ``"classification"`` adds ``prediction`` (argmax, long) and ``score`` (softmax
        max probability); ``"regression"`` adds ``prediction`` (double).
    :param batch_size: rows per Arrow batch handed to the model (~10k amortises per-batch cost).
    :param torch_threads: intra-op threads per Python worker; default the Spark task's CPUs.
    :param udf: ``"arrow"`` (``mapInArrow``: list columns become the input matrix without a Python
        object per row; key columns travel through Python) or ``"pandas"`` (a pandas UDF over the
        feature columns only; arrays become one NumPy object per row).
    :param partition_formats: the format each output partition column's value must have, ``"date"``
        or a regular expression matching the whole value, e.g. ``{"ds": "date"}``; a value that does
        not match is refused before the model is resolved or any row is read.
    :param allow_non_finite: write rows whose model output is NaN or infinite (their ``prediction``
        and ``score`` mean nothing). Default False: such rows make the write fail as a user error
        naming the model version and their count, and nothing is committed.
    """

    feature_columns: tuple[str, ...]
    key_columns: tuple[str, ...] = ()
    task: str = "classification"
    batch_size: int = 10_000
    torch_threads: int | None = None
    udf: str = "arrow"
    partition_formats: Mapping[str, str] | None = None
    allow_non_finite: bool = False

    def __post_init__(self) -> None:
        from airflow_provider_dltrain.lake.partition import check_partition_formats

        formats = check_partition_formats(self.partition_formats, field="scoring.partition_formats")
        object.__setattr__(self, "partition_formats", formats or None)
        features = _names(self.feature_columns, "feature_columns", allow_empty=False)
        keys = _names(self.key_columns, "key_columns", allow_empty=True)
        object.__setattr__(self, "feature_columns", features)
        object.__setattr__(self, "key_columns", keys)
        if self.task not in TASKS:
            raise InvalidSpecError(f"scoring.task must be one of {TASKS}, got {self.task!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise InvalidSpecError(f"scoring.batch_size must be a positive integer, got {self.batch_size!r}")
        if not isinstance(self.allow_non_finite, bool):
            raise InvalidSpecError(
                f"scoring.allow_non_finite must be True or False, got {self.allow_non_finite!r}"
            )
        if self.udf not in UDFS:
            raise InvalidSpecError(f"scoring.udf must be one of {UDFS}, got {self.udf!r}")
        threads = self.torch_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise InvalidSpecError(f"scoring.torch_threads must be None or an integer >= 1, not {threads!r}")
        clash = sorted(set(keys) & set(self.output_columns))
        if clash:
            raise InvalidSpecError(
                f"scoring.key_columns {clash} collide with the output columns {list(self.output_columns)}; "
                "rename them in the input (e.g. select ... AS id_prediction)"
            )

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The columns added to the key columns, in output order."""
        predictions = (PREDICTION, SCORE) if self.task == "classification" else (PREDICTION,)
        return (*predictions, MODEL_NAME, MODEL_VERSION, INPUT_VERSION)

    def prediction_ddl(self) -> str:
        """Spark DDL of the struct the scoring UDF returns."""
        if self.task == "classification":
            return f"{PREDICTION} long, {SCORE} double"
        return f"{PREDICTION} double"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["feature_columns"] = list(self.feature_columns)
        data["key_columns"] = list(self.key_columns)
        return data

    @classmethod
    def coerce(cls, value: ScoringSpec | Mapping[str, Any]) -> ScoringSpec:
        """Accept a ``ScoringSpec`` or its dict (e.g. from a DAG's params); unknown keys are refused."""
        if isinstance(value, ScoringSpec):
            return value
        if not isinstance(value, Mapping):
            raise InvalidSpecError(
                "scoring must be a ScoringSpec or a dict like {'feature_columns': ['features'], "
                f"'key_columns': ['id']}}; got {type(value).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidSpecError(f"scoring has unknown keys {unknown}; allowed: {sorted(known)}")
        if "feature_columns" not in value:
            raise InvalidSpecError("scoring.feature_columns is required, e.g. ['features']")
        return cls(**dict(value))
