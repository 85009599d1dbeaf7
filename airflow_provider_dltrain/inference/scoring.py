"""Driver side of batch scoring: one Delta version in, one partition of scored rows out.

Scoring is a Spark pandas UDF in the iterator form (``Iterator[pd.Series] -> Iterator[pd.DataFrame]``):
Spark hands each Python worker a stream of Arrow batches, the worker loads the model once
(``worker.load_model``) and calls it once per batch. Only the feature columns travel to Python;
key columns stay in the JVM next to their rows. "Once per worker" relies on
``spark.python.worker.reuse=true`` (the default, also set by ``etl.spark_session``); without reuse
the model would be loaded once per task, still never once per batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import (
    BadDataError,
    InvalidSpecError,
    NonFiniteError,
    SchemaMismatchError,
)
from airflow_provider_dltrain.inference.model import ScoringModel
from airflow_provider_dltrain.inference.score_spec import (
    INPUT_VERSION,
    MODEL_NAME,
    MODEL_VERSION,
    ScoringSpec,
)
from airflow_provider_dltrain.inference.worker import (
    LOAD_LOG_ENV,
    NON_FINITE,
    WORKER_ERROR_MARK,
    WorkerConfig,
)
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.store.config import TrackingConfig

if TYPE_CHECKING:
    from airflow_provider_dltrain.etl.writer import WriteResult

log = logging.getLogger(__name__)
_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
_PRED = "_dltrain_prediction"
NON_FINITE_REASON = "the model's output is NaN or infinite"  # the writer's bad-row reason for such rows


def worker_config(
    model: ScoringModel,
    scoring: ScoringSpec,
    tracking: TrackingConfig,
    *,
    allow_pickle: bool = False,
    archive: Any = None,
) -> WorkerConfig:
    """What the UDF closure ships to every worker (credentials as environment, never as params)."""
    return WorkerConfig(
        model_uri=model.model_uri,
        tracking_uri=tracking.tracking_uri,
        registry_uri=tracking.registry_uri,
        task=scoring.task,
        feature_columns=scoring.feature_columns,
        torch_threads=scoring.torch_threads,
        load_log_dir=os.environ.get(LOAD_LOG_ENV) or None,
        env=dict(tracking.env),
        allow_pickle=allow_pickle,
        archive=archive,
    )


def model_archive(
    spark: Any, model: ScoringModel, tracking: TrackingConfig, *, allow_pickle: bool = False
) -> Any:
    """The model's checked pt2 archive broadcast to the workers, or None if only MLflow can load it.

    Downloaded and checked once here (:func:`store.loading.fetch_pt2`), so no worker imports
    MLflow or downloads the model. ``destroy()`` it once the jobs that score are done.
    """
    from airflow_provider_dltrain.store.loading import fetch_pt2, model_label

    label = model_label(model.name, model.version, model.model_uri)
    with tracking.activated():
        data = fetch_pt2(model.model_uri, label, allow_pickle=allow_pickle)
    return None if data is None else spark.sparkContext.broadcast(data)


def scoring_udf(cfg: WorkerConfig, return_ddl: str) -> Any:
    """A scalar-iterator pandas UDF over the feature columns returning the prediction struct."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    from airflow_provider_dltrain.inference.worker import predict_batches

    def score(batches: Any) -> Any:
        return predict_batches(batches, cfg)

    # Real (not string) annotations: Spark infers the UDF kind from them.
    many = len(cfg.feature_columns) > 1
    score.__annotations__ = {
        "batches": Iterator[tuple[pd.Series, ...]] if many else Iterator[pd.Series],
        "return": Iterator[pd.DataFrame],
    }
    return pandas_udf(score, returnType=return_ddl)  # type: ignore[call-overload]


def check_columns(df: Any, scoring: ScoringSpec) -> None:
    """Raise :class:`SchemaMismatchError` naming missing or non-numeric columns before any job runs."""
    from pyspark.sql.types import ArrayType, NumericType

    types = {f.name: f.dataType for f in df.schema.fields}
    missing = [c for c in (*scoring.feature_columns, *scoring.key_columns) if c not in types]
    if missing:
        raise SchemaMismatchError(f"input has no column(s) {missing}; it has {sorted(types)}")
    for name in scoring.feature_columns:
        t = types[name]
        inner = t.elementType if isinstance(t, ArrayType) else t
        if not isinstance(inner, NumericType):
            raise SchemaMismatchError(
                f"feature column {name!r} is {t.simpleString()}; "
                "features must be numeric or arrays of numbers"
            )


def score_dataframe(
    df: Any,
    model: ScoringModel,
    scoring: ScoringSpec,
    tracking: TrackingConfig,
    *,
    input_version: int | None,
    allow_pickle: bool = False,
    archive: Any = None,
) -> Any:
    """``df``'s key columns plus prediction(s), ``model_name``, ``model_version``, ``input_version``.

    ``archive`` (from :func:`model_archive`) lets the workers load the model without MLflow; without
    it each Python worker downloads and checks the model through MLflow.

    Unless ``scoring.allow_non_finite``, also ``_error``: set where the model's output is NaN or
    infinite, so that the writer rejects those rows (see :func:`score_table`).
    Lazy: nothing runs until the result is written or collected.
    """
    from pyspark.sql import functions as F

    from airflow_provider_dltrain.etl.spark import worker_preload
    from airflow_provider_dltrain.etl.writer import ERROR_COLUMN

    check_columns(df, scoring)
    cfg = worker_config(model, scoring, tracking, allow_pickle=allow_pickle, archive=archive)
    with worker_preload(df.sparkSession, ("torch",)):  # scoring workers start with torch imported
        if scoring.udf == "arrow":
            scored = _map_in_arrow(df, cfg, scoring)
        else:
            udf = scoring_udf(cfg, _udf_ddl(scoring))
            scored = df.select(*scoring.key_columns, udf(*scoring.feature_columns).alias(_PRED))
    predictions = [F.col(f"{_PRED}.{c}").alias(c) for c in scoring.output_columns[:-3]]
    rejected = (
        []
        if scoring.allow_non_finite
        else [F.when(F.col(f"{_PRED}.{NON_FINITE}"), F.lit(NON_FINITE_REASON)).alias(ERROR_COLUMN)]
    )
    return scored.select(
        *scoring.key_columns,
        *predictions,
        F.lit(model.name).cast("string").alias(MODEL_NAME),
        F.lit(model.version).cast("long").alias(MODEL_VERSION),
        F.lit(input_version).cast("long").alias(INPUT_VERSION),
        *rejected,
    )


def _udf_ddl(scoring: ScoringSpec) -> str:
    """The struct the UDF returns: the predictions, then whether the model's output row was non-finite."""
    return f"{scoring.prediction_ddl()}, {NON_FINITE} boolean"


def _map_in_arrow(df: Any, cfg: WorkerConfig, scoring: ScoringSpec) -> Any:
    """Key columns and the prediction struct, scored batch by batch in ``mapInArrow``."""
    from airflow_provider_dltrain.inference.worker import predict_arrow_batches

    keys = scoring.key_columns
    types = {f.name: f.dataType for f in df.schema.fields}
    ddl = ", ".join(
        [*(f"`{k}` {types[k].simpleString()}" for k in keys), f"{_PRED} struct<{_struct(scoring)}>"]
    )

    def score(batches: Any) -> Any:
        return predict_arrow_batches(batches, cfg, keys, _PRED)

    columns = list(dict.fromkeys([*keys, *scoring.feature_columns]))
    return df.select(*columns).mapInArrow(score, ddl)


def _struct(scoring: ScoringSpec) -> str:
    ddl = _udf_ddl(scoring)
    return ddl.replace(" long", ":bigint").replace(" double", ":double").replace(" boolean", ":boolean")


@contextlib.contextmanager
def arrow_batch_size(spark: Any, rows: int) -> Iterator[None]:
    """Set the Arrow batch size for the jobs run inside the block, then restore the previous value."""
    previous = spark.conf.get(_BATCH_CONF, None)
    spark.conf.set(_BATCH_CONF, str(rows))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(_BATCH_CONF)
        else:
            spark.conf.set(_BATCH_CONF, previous)


@contextlib.contextmanager
def worker_errors_as_user_errors() -> Iterator[None]:
    """Turn a worker's deterministic input error back into :class:`SchemaMismatchError` on the driver."""
    try:
        yield
    except Exception as err:
        text = str(err)
        if WORKER_ERROR_MARK not in text or isinstance(err, SchemaMismatchError):
            raise
        detail = text.split(WORKER_ERROR_MARK, 1)[1].strip().splitlines()[0]
        raise SchemaMismatchError(detail) from err


def read_input(spark: Any, ref: DeltaRef, input_filter: Any, storage_options: StorageOptions | None) -> Any:
    """Exactly the rows of ``ref``'s version matching ``input_filter``, deleted rows excluded.

    ``input_filter`` is a DNF list of ``[column, op, value]``: partition predicates prune files
    before anything is read; every predicate selects rows.
    """
    from airflow_provider_dltrain.etl.inputs import check_filters, delta_rs_filters, read_scan
    from airflow_provider_dltrain.lake.reader import scan_version

    dnf = check_filters(input_filter, "input_filter")
    scan = scan_version(ref, storage_options, delta_rs_filters(dnf))
    if not scan.files:
        raise InvalidSpecError(
            f"input {ref.uri} version {ref.version} has no data files matching input_filter "
            f"{[list(map(list, c)) for c in dnf]}; check the filter, or that the task producing that partition ran"
        )
    if scan.deleted_rows:
        log.info(
            "%s v%s: %d row(s) removed by deletion vectors are skipped",
            ref.uri,
            ref.version,
            scan.deleted_rows,
        )
    return read_scan(spark, scan, storage_options, dnf)


def score_partition(
    spark: Any,
    model: ScoringModel,
    input_ref: DeltaRef | Mapping[str, Any],
    table_uri: str,
    partition: Mapping[str, object],
    *,
    scoring: ScoringSpec | Mapping[str, Any],
    tracking: TrackingConfig,
    input_filter: Any = None,
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
    allow_pickle: bool = False,
    input_storage_options: StorageOptions | None = None,
) -> WriteResult:
    """Score ``input_ref`` at exactly its version into ``partition`` of ``table_uri``; return the write.

    Re-running with the same arguments leaves the same rows: the partition is overwritten in one
    Delta commit, other partitions are untouched. A model that would run code while loading (pickle
    format, ``code_paths``) is refused before any worker loads it, unless ``allow_pickle`` (a warning).
    ``storage_options`` reach ``table_uri``; ``input_storage_options`` the input (default: the same).
    """
    from airflow_provider_dltrain.etl.inputs import check_filters
    from airflow_provider_dltrain.etl.writer import write_dataframe
    from airflow_provider_dltrain.lake.partition import validate_partition

    spec = ScoringSpec.coerce(scoring)
    partition = validate_partition(partition, formats=spec.partition_formats)  # before anything is read
    ref = DeltaRef.coerce(input_ref)  # type: ignore[arg-type]
    check_filters(input_filter, "input_filter")  # before the model or any file is touched
    in_options = storage_options if input_storage_options is None else input_storage_options
    # Refuses a model that runs code on load before any input is read or any worker loads it.
    archive = model_archive(spark, model, tracking, allow_pickle=allow_pickle)
    try:
        df = read_input(spark, ref, input_filter, in_options)
        scored = score_dataframe(
            df, model, spec, tracking, input_version=ref.version, allow_pickle=allow_pickle, archive=archive
        )
        log.info(
            "scoring %s v%s with %s into %s %s", ref.uri, ref.version, model.model_uri, table_uri, partition
        )
        with arrow_batch_size(spark, spec.batch_size), worker_errors_as_user_errors():
            try:
                result = write_dataframe(
                    scored,
                    table_uri,
                    partition,
                    metadata={**dict(metadata or {}), **_model_metadata(model, ref)},
                    storage_options=storage_options,
                )
            except BadDataError as err:
                if NON_FINITE_REASON not in err.reasons:
                    raise
                raise _non_finite_refusal(err, model, ref, table_uri, spec) from err
    finally:
        if archive is not None:
            archive.destroy()
    out = result.ref
    log.info("wrote %d scored row(s) to %s version %d", result.rows_written, out.uri, out.version)
    return result


def score_table(
    spark: Any,
    model: ScoringModel,
    input_ref: DeltaRef | Mapping[str, Any],
    table_uri: str,
    partition: Mapping[str, object],
    *,
    scoring: ScoringSpec | Mapping[str, Any],
    tracking: TrackingConfig,
    input_filter: Any = None,
    metadata: Mapping[str, str] | None = None,
    storage_options: StorageOptions | None = None,
    allow_pickle: bool = False,
    input_storage_options: StorageOptions | None = None,
) -> DeltaRef:
    """:func:`score_partition`, returning only the new version of ``table_uri``."""
    return score_partition(
        spark,
        model,
        input_ref,
        table_uri,
        partition,
        scoring=scoring,
        tracking=tracking,
        input_filter=input_filter,
        metadata=metadata,
        storage_options=storage_options,
        allow_pickle=allow_pickle,
        input_storage_options=input_storage_options,
    ).ref


def _non_finite_refusal(
    err: BadDataError, model: ScoringModel, ref: DeltaRef, table_uri: str, spec: ScoringSpec
) -> NonFiniteError:
    """The error naming the model version, how many rows it gave no finite output for, and one of them."""
    import json

    from airflow_provider_dltrain.store.loading import model_label

    count = err.reasons[NON_FINITE_REASON]
    sample = ""
    if err.example and spec.key_columns:
        try:
            row = json.loads(err.example)
            sample = " (e.g. the row with " + ", ".join(f"{k}={row.get(k)!r}" for k in spec.key_columns) + ")"
        except ValueError:  # a preview cut short: no key to show
            sample = ""
    return NonFiniteError(
        f"{model_label(model.name, model.version, model.model_uri)} returned NaN or infinite output "
        f"for {count} of {err.total} row(s) of {ref.uri} version {ref.version}{sample}; nothing was committed "
        f"to {table_uri}. Check that model version (was it trained to a NaN loss?), score with another "
        "one, or set allow_non_finite=True in the scoring spec to write such rows anyway."
    )


def _model_metadata(model: ScoringModel, ref: DeltaRef) -> dict[str, str]:
    """``dltrain.*`` commit metadata: which model scored which input version."""
    from airflow_provider_dltrain.lake.write import commit_metadata

    return commit_metadata(
        model_name=model.name,
        model_version=model.version,
        model_uri=model.model_uri,
        input_uri=ref.uri,
        input_version=ref.version,
    )
