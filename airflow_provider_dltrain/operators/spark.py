"""``SparkToDeltaOperator``: run a Spark transform and replace one partition of a Delta table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.engines import ENGINE_NAMES, check_engine_name
from airflow_provider_dltrain.etl.write_options import DeltaWriteOptions
from airflow_provider_dltrain.operators.engine_run import EngineJobLink, EngineRun, checked_options
from airflow_provider_dltrain.operators.openlineage import LineageResultMixin
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error
from airflow_provider_dltrain.utils.input_checks import check_force, check_partition

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines import RunSpec
    from airflow_provider_dltrain.etl.rerun_check import RerunCheck

ENGINES = ENGINE_NAMES
__all__ = ["ENGINES", "DeltaWriteOptions", "SparkToDeltaOperator"]


class SparkToDeltaOperator(LineageResultMixin, EngineRun, BaseOperator):
    """Run ``transform(spark, inputs, params)`` and atomically replace ``partition`` of ``table_uri``.

    Re-running the same partition leaves the table as one run would. Rows the transform marks with a
    non-null ``_error`` go to a quarantine table. Returns the new version as a ``DeltaRef`` dict (plus
    row counts) and emits an Asset event with the version and partition in ``extra``.

    :param table_uri: target Delta table, local path or ``s3://`` (templated).
    :param partition: the partition to replace, e.g. ``{"ds": "{{ data_interval_start | ds }}"}`` (templated).
        Its values are checked before any work starts (literal ones when the DAG is parsed): never
        trimmed, no whitespace or characters unsafe in a directory name, and the format
        ``write.partition_formats`` declares for the column (e.g. ``{"ds": "date"}``).
    :param transform: a callable or ``"package.module:function"``.
    :param inputs: name → ``{"path", "format", "options"}`` raw files or a ``DeltaRef`` dict with
        optional ``"filters"`` (a DNF list of ``[column, op, value]``); either may name its own
        ``"aws_conn_id"`` for an ``s3://`` location (default: ``aws_conn_id``) (templated).
    :param transform_params: passed to the transform as its third argument (templated). Not named
        ``params``: that name belongs to Airflow's DAG/task Params, which Airflow merges and never renders.
    :param engine: where Spark runs (templated): ``"local"`` (an embedded session in the worker),
        ``"glue"``, ``"emr"``, ``"emr_serverless"``, ``"spark_submit"`` (any Spark cluster),
        ``"sagemaker_processing"`` (a processing job) or ``"ec2"`` (one instance per run, Spark ``local[*]``).
    :param engine_options: the engine's settings (templated), e.g. ``{"staging_uri": "s3://b/dltrain",
        "role": "GlueRole"}`` for Glue, or the engine's options object (``engines.glue.GlueOptions``);
        an unknown key or a bad value fails when the DAG file is parsed, and the operator keeps the
        typed object (a dict with a Jinja value: checked once rendered). See docs/engines/index.md.
    :param deferrable: wait for a cloud job in the triggerer instead of a worker slot.
    :param poll_interval: seconds between job state checks.
    :param write: a :class:`DeltaWriteOptions` (or its dict), ``partition_formats`` included.
    :param aws_conn_id: Airflow ``aws`` connection for an ``s3://`` target table, and for inputs that
        name none (ignored for local paths).
    :param spark_conf: extra Spark settings for the session.
    :param force: run the stage even when its partition would be rewritten with the content it holds
        (by default such a run starts no Spark session and submits no job; see the docs'
        "Unchanged re-runs", docs/backfills.md) (templated: ``True``, ``False`` or their text).
    """

    template_fields: Sequence[str] = (
        "table_uri",
        "partition",
        "inputs",
        "transform_params",
        "write_options_",
        "engine",
        "engine_options",
        "force",
    )
    template_fields_renderers = {"partition": "json", "inputs": "json", "transform_params": "json"}
    ui_color = "#e5f2ff"
    operator_extra_links = (EngineJobLink(),)

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
        engine_options: Mapping[str, Any] | object | None = None,
        deferrable: bool = False,
        poll_interval: float = 15.0,
        force: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_engine_name(engine)
        self.force = force
        check_force(force, rendered=False)  # a literal that is not a bool fails when the DAG is parsed
        self.table_uri = table_uri
        self.partition = partition
        self.transform = transform
        self.inputs = inputs or {}
        self.transform_params = transform_params or {}
        self.engine = engine
        self.write_options_ = write if isinstance(write, dict) else (write.__dict__ if write else {})
        # literal values are refused while the DAG file is parsed (an import error naming them)
        check_partition(partition, self.write_options_.get("partition_formats"), rendered=False)
        self.aws_conn_id = aws_conn_id
        self.spark_conf = spark_conf or {}
        self.engine_options = checked_options(engine, engine_options)
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def _storage(self) -> Callable[[str], dict[str, str] | None]:
        """``uri -> storage options``: an input's own ``aws_conn_id``, else the operator's."""
        from collections.abc import Mapping

        from airflow_provider_dltrain.etl.inputs import input_uri
        from airflow_provider_dltrain.lake.storage import normalize_uri
        from airflow_provider_dltrain.operators.task_context import storage_options_for

        conn_ids: dict[str, str | None] = {}
        for spec in self.inputs.values():
            uri = input_uri(spec)
            if uri and isinstance(spec, Mapping) and "aws_conn_id" in spec:
                conn_ids[normalize_uri(uri)] = spec["aws_conn_id"]

        def resolve(uri: str) -> dict[str, str] | None:
            return storage_options_for(conn_ids.get(normalize_uri(uri), self.aws_conn_id), uri)

        return resolve

    def run_spec(self, context: Context) -> RunSpec:
        """The stage as a :class:`RunSpec` (what a cloud job receives)."""
        from airflow_provider_dltrain.engines import RunSpec
        from airflow_provider_dltrain.etl.dvc_inputs import recorded_inputs, resolve_dvc_inputs
        from airflow_provider_dltrain.etl.inputs import check_inputs
        from airflow_provider_dltrain.etl.write_options import check_write_options
        from airflow_provider_dltrain.operators.engine_run import identity_from
        from airflow_provider_dltrain.operators.task_context import commit_metadata_from

        check_write_options(self.write_options_)
        formats = self.write_options_.get("partition_formats")
        partition = check_partition(self.partition, formats, rendered=True)  # before any work starts
        check_inputs(self.inputs)

        # DVC inputs pinned to a commit and md5 once, before Spark: the run, its facts and lineage agree;
        # a moving revision to the commit the partition's last write read (a backfill reads the nightly's)
        def recorded() -> dict[str, Any] | None:
            return recorded_inputs(self.table_uri, partition or {}, self._storage()(self.table_uri))

        inputs = resolve_dvc_inputs(self.inputs, recorded=recorded)
        self._pinned_inputs = inputs
        transform = self.transform
        if callable(transform):
            transform = f"{transform.__module__}:{transform.__qualname__}"
        return RunSpec(
            stage="etl",
            table_uri=self.table_uri,
            partition=dict(partition or {}),
            params={
                "transform": transform,
                "inputs": inputs,
                "transform_params": self.transform_params,
                "write": self.write_options_,
                "spark_conf": self.spark_conf,
            },
            identity=identity_from(context),
            metadata=commit_metadata_from(context),
        )

    def rerun_check(self, spec: RunSpec) -> RerunCheck:
        """Whether the run would rewrite its partition unchanged: what ``execute`` and the backfill
        plan both decide with (:func:`~airflow_provider_dltrain.etl.rerun_check.check_etl`)."""
        from airflow_provider_dltrain.etl.rerun_check import check_etl

        local_transform = self.transform if callable(self.transform) else None
        force = check_force(self.force, rendered=True)
        return check_etl(spec, self._storage(), transform=local_transform, force=force)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.jobs.stages import run_stage

        with fail_fast_on_user_error():
            spec = self.run_spec(context)
            local_transform = self.transform if callable(self.transform) else None
            rerun = self.rerun_check(spec)
            self.log.info("%s", rerun.reason)
            if rerun.result is not None:  # unchanged: no Spark session, no job
                return self._done(context, rerun.result)
            spec = rerun.apply(spec)
            result = self.run_stage_on_engine(
                context,
                spec,
                lambda: run_stage(spec, storage=self._storage(), transform=local_transform),
            )
        return self._done(context, result)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        with fail_fast_on_user_error():
            result = self.resume_from_trigger(context, event)
        return self._done(context, result)

    def on_kill(self) -> None:
        self.kill_job()

    def _done(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        self._emit_asset_event(context, result)
        self._keep_for_lineage(result)
        return result

    def _lineage_datasets(self, result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """OpenLineage: the inputs as given (Delta ones at their version), the table version written."""
        from airflow_provider_dltrain.operators.openlineage import delta_dataset, input_datasets

        inputs = getattr(self, "_pinned_inputs", None) or self.inputs
        return input_datasets(inputs), [delta_dataset(result["uri"], result["version"])]

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
