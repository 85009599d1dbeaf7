"""``SparkToDeltaOperator``: run a Spark transform and replace one partition of a Delta table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.utils.airflow_errors import fail_fast_on_user_error

if TYPE_CHECKING:
    from airflow.sdk import Context

ENGINES = ("local",)


@dataclass(frozen=True)
class DeltaWriteOptions:
    """How the transform's output is written.

    :param partition_by: partition columns of the table (default: the keys of ``partition``).
    :param schema_mode: ``"strict"`` (default) refuses any schema change; ``"merge"`` adds new columns.
    :param max_bad_fraction: share of rows marked ``_error`` above which nothing is committed to
        either table; default ``0.0``: any bad row fails the write (set e.g. ``0.05`` to quarantine
        up to 5 % and commit the rest).
    :param quarantine_uri: table for bad rows (default: ``<table_uri>_quarantine``).
    :param num_files: coalesce the output to this many files per write (default: Spark's partitioning).
    :param allow_empty: commit a write with no rows (empties the partition); refused by default.
    """

    partition_by: tuple[str, ...] | None = None
    schema_mode: str = "strict"
    max_bad_fraction: float = 0.0
    quarantine_uri: str | None = None
    num_files: int | None = None
    allow_empty: bool = False


class SparkToDeltaOperator(BaseOperator):
    """Run ``transform(spark, inputs, params)`` and atomically replace ``partition`` of ``table_uri``.

    Re-running the same partition leaves the table as one run would. Rows the transform marks with a
    non-null ``_error`` go to a quarantine table. Returns the new version as a ``DeltaRef`` dict (plus
    row counts) and emits an Asset event with the version and partition in ``extra``.

    :param table_uri: target Delta table, local path or ``s3://`` (templated).
    :param partition: the partition to replace, e.g. ``{"ds": "{{ data_interval_start | ds }}"}`` (templated).
    :param transform: a callable or ``"package.module:function"``.
    :param inputs: name → ``{"path", "format", "options"}`` raw files or a ``DeltaRef`` dict with
        optional ``"filters"`` (a DNF list of ``[column, op, value]``); either may name its own
        ``"aws_conn_id"`` for an ``s3://`` location (default: ``aws_conn_id``) (templated).
    :param transform_params: passed to the transform as its third argument (templated). Not named
        ``params``: that name belongs to Airflow's DAG/task Params, which Airflow merges and never renders.
    :param engine: where Spark runs; ``"local"`` (embedded ``local[*]`` session).
    :param write: a :class:`DeltaWriteOptions` (or its dict).
    :param aws_conn_id: Airflow ``aws`` connection for an ``s3://`` target table, and for inputs that
        name none (ignored for local paths).
    :param spark_conf: extra Spark settings for the session.
    """

    template_fields: Sequence[str] = (
        "table_uri",
        "partition",
        "inputs",
        "transform_params",
        "write_options_",
    )
    template_fields_renderers = {"partition": "json", "inputs": "json", "transform_params": "json"}
    ui_color = "#e5f2ff"

    def __init__(
        self,
        *,
        table_uri: str,
        partition: dict[str, str],
        transform: Callable[..., Any] | str,
        inputs: dict[str, Any] | None = None,
        transform_params: dict[str, Any] | None = None,
        engine: str = "local",
        write: DeltaWriteOptions | dict[str, Any] | None = None,
        aws_conn_id: str | None = None,
        spark_conf: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r} is not available; choose one of {ENGINES}")
        self.table_uri = table_uri
        self.partition = partition
        self.transform = transform
        self.inputs = inputs or {}
        self.transform_params = transform_params or {}
        self.engine = engine
        self.write_options_ = write if isinstance(write, dict) else (write.__dict__ if write else {})
        self.aws_conn_id = aws_conn_id
        self.spark_conf = spark_conf or {}

    def _storage_options(self) -> dict[str, str] | None:
        from airflow_provider_dltrain.utils.context import storage_options_for

        return storage_options_for(self.aws_conn_id, self.table_uri)

    def _input_storage_options(self) -> dict[str, dict[str, str] | None]:
        """Each input's storage options, from its own ``aws_conn_id`` (default: the operator's)."""
        from collections.abc import Mapping

        from airflow_provider_dltrain.etl.inputs import input_uri
        from airflow_provider_dltrain.utils.context import storage_options_for

        options = {}
        for name, spec in self.inputs.items():
            conn_id = (
                spec.get("aws_conn_id", self.aws_conn_id) if isinstance(spec, Mapping) else self.aws_conn_id
            )
            uri = input_uri(spec)
            options[name] = storage_options_for(conn_id, uri) if uri else None
        return options

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.etl import read_inputs, run_transform, spark_session, write_dataframe
        from airflow_provider_dltrain.etl.inputs import check_inputs
        from airflow_provider_dltrain.utils.context import commit_metadata_from

        with fail_fast_on_user_error():
            options = _write_options(self.write_options_)
            check_inputs(self.inputs)
            storage = self._storage_options()
            input_storage = self._input_storage_options()
            spark = spark_session(conf=self.spark_conf)
            self.log.info("reading inputs %s", sorted(self.inputs))
            frames = read_inputs(spark, self.inputs, storage, input_storage_options=input_storage)
            df = run_transform(spark, self.transform, frames, self.transform_params)
            if options.num_files:
                df = df.coalesce(int(options.num_files))
            result = write_dataframe(
                df,
                self.table_uri,
                self.partition,
                partition_by=list(options.partition_by) if options.partition_by else None,
                schema_mode=options.schema_mode,  # type: ignore[arg-type]
                metadata=commit_metadata_from(context),
                storage_options=storage,
                quarantine_uri=options.quarantine_uri,
                max_bad_fraction=options.max_bad_fraction,
                allow_empty=options.allow_empty,
            )
        self.log.info(
            "%s %s version %d: %d row(s), %d quarantined%s",
            "committed" if result.committed else "unchanged content, no commit; still",
            result.ref.uri,
            result.ref.version,
            result.rows_written,
            result.rows_quarantined,
            f" ({result.reasons})" if result.reasons else "",
        )
        self._emit_asset_event(context, result.to_dict())
        return result.to_dict()

    def _emit_asset_event(self, context: Context, value: dict[str, Any]) -> None:
        # Airflow emits an event for every outlet of a successful task; ``committed`` tells consumers
        # whether this one carries new content or re-confirms the version that already holds it.
        extra = {
            "version": value["version"],
            "partition": dict(self.partition),
            "uri": value["uri"],
            "committed": bool(value.get("committed", True)),
        }
        for outlet in self.outlets or []:
            if getattr(outlet, "uri", None) is not None:
                context["outlet_events"][outlet].extra = extra


def _write_options(values: dict[str, Any]) -> DeltaWriteOptions:
    """``DeltaWriteOptions`` from the ``write`` dict; an unknown key is a user error naming it."""
    import dataclasses

    from airflow_provider_dltrain.exceptions import InvalidSpecError

    known = {f.name for f in dataclasses.fields(DeltaWriteOptions)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InvalidSpecError(f"write: unknown option(s) {unknown}; known options: {sorted(known)}")
    return DeltaWriteOptions(**values)
