"""``SparkBatchInferenceOperator``: score one Delta version with an MLflow model into one partition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.engines import ENGINE_NAMES, check_engine_name
from airflow_provider_dltrain.operators.engine_run import EngineJobLink, EngineRun, checked_options
from airflow_provider_dltrain.operators.openlineage import LineageResultMixin
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines import RunSpec
    from airflow_provider_dltrain.etl.rerun_check import RerunCheck
    from airflow_provider_dltrain.inference.model import ScoringModel
    from airflow_provider_dltrain.inference.score_spec import ScoringSpec
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.store.config import TrackingConfig

ENGINES = ENGINE_NAMES


class SparkBatchInferenceOperator(LineageResultMixin, EngineRun, BaseOperator):
    """Score ``input`` (one exact Delta version) with one MLflow model version into ``partition``.

    The model spec is resolved once, on the driver, to one model version (an alias moving during
    the run changes nothing); workers load it once each. Output rows keep the key columns and add
    ``prediction`` (and ``score``), ``model_name``, ``model_version`` and ``input_version``.
    Re-running leaves the table as one run would. Returns the new version as a ``DeltaRef`` dict and
    sets ``version``/``partition`` in the ``extra`` of the Asset events of ``outlets``.

    :param model: ``"models:/name/3"``, ``"runs:/<id>/model"``, ``{"name": n, "alias": "champion"}``,
        ``{"name": n, "version": 3}`` or ``{"name": n, "champion_as_of": "2026-11-28"}`` (templated).
    :param input: the ``DeltaRef`` dict to score, e.g. an upstream task's XCom (templated).
    :param table_uri: output Delta table, local path or ``s3://`` (templated).
    :param partition: output partition to replace, e.g.
        ``{"ds": "{{ data_interval_start | ds }}"}`` (templated). Its values are checked before any
        work starts, as ``SparkToDeltaOperator`` checks them, against ``scoring.partition_formats``.
    :param scoring: a :class:`~airflow_provider_dltrain.inference.ScoringSpec` or its dict:
        ``feature_columns``, ``key_columns``, ``task``, ``batch_size``, ``torch_threads``,
        ``partition_formats`` (e.g. ``{"ds": "date"}``), ``allow_non_finite`` (default False: rows
        whose model output is NaN or infinite fail the task and nothing is committed).
    :param input_filter: DNF partition filter on the input, e.g. ``[["ds", "=", "{{ ds }}"]]`` (templated).
    :param engine: where Spark runs (templated): ``"local"`` (an embedded session in the worker),
        ``"glue"``, ``"emr"``, ``"emr_serverless"``, ``"spark_submit"``, ``"sagemaker_processing"``
        (a processing job) or ``"ec2"`` (one instance per run, Spark ``local[*]``). A cloud job loads
        the pinned model version's files from the artifact store with its own role.
    :param engine_options: the engine's settings (templated); see ``SparkToDeltaOperator``.
    :param deferrable: wait for a cloud job in the triggerer instead of a worker slot.
    :param poll_interval: seconds between job state checks.
    :param model_as_of: date used when ``model`` asks for ``champion_as_of`` without one,
        e.g. ``"{{ data_interval_start | ds }}"``: the run covering [D, D+1) then scores with the
        champion for data cut-off D, as the nightly run of D did (``data_interval_end`` would pick
        the champion of D+1, a model trained after D's data was scored) (templated).
    :param mlflow_conn_id: Airflow ``mlflow`` connection; ``None`` uses ``$MLFLOW_TRACKING_URI``
        or the embedded SQLite store.
    :param aws_conn_id: Airflow ``aws`` connection for an ``s3://`` output table (ignored for local paths).
    :param input_aws_conn_id: Airflow ``aws`` connection for an ``s3://`` input; default ``aws_conn_id``.
    :param allow_pickle: score with a model saved in PyTorch's pickle format (or logged with
        ``code_paths``) anyway, logging a warning. Default False: such a model is refused before
        any worker loads it, because unpickling runs code it carries; re-log it with
        ``serialization_format="pt2"`` instead. Only for registries that only trusted people can write.
    :param force: score even when the partition would be rewritten with the content it holds (by
        default such a run loads no model, starts no Spark session and submits no job; see the
        docs' "Unchanged re-runs", docs/backfills.md) (templated: ``True``, ``False`` or their text).
    """

    template_fields: Sequence[str] = (
        "model",
        "input",
        "table_uri",
        "partition",
        "input_filter",
        "model_as_of",
        "engine",
        "engine_options",
        "force",
    )
    template_fields_renderers = {
        "model": "json",
        "input": "json",
        "partition": "json",
        "input_filter": "json",
    }
    ui_color = "#fff1e0"
    operator_extra_links = (EngineJobLink(),)

    def __init__(
        self,
        *,
        model: str | dict[str, Any],
        input: DeltaRef | dict[str, Any] | Any,
        table_uri: str,
        partition: dict[str, str],
        scoring: ScoringSpec | dict[str, Any],
        input_filter: list[list[Any]] | None = None,
        engine: str = "local",
        model_as_of: str | None = None,
        mlflow_conn_id: str | None = "mlflow_default",
        aws_conn_id: str | None = None,
        input_aws_conn_id: str | None = None,
        allow_pickle: bool = False,
        engine_options: Mapping[str, Any] | object | None = None,
        deferrable: bool = False,
        poll_interval: float = 15.0,
        force: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from airflow_provider_dltrain.inference.score_spec import ScoringSpec
        from airflow_provider_dltrain.utils.input_checks import check_force

        self.force = force
        check_force(force, rendered=False)  # a literal that is not a bool fails when the DAG is parsed

        check_engine_name(engine)
        self.model = model
        self.input = input
        self.table_uri = table_uri
        self.partition = partition
        self.scoring = ScoringSpec.coerce(scoring)  # a bad spec fails when the DAG is parsed
        self.input_filter = input_filter
        self.engine = engine
        self.model_as_of = model_as_of
        self.mlflow_conn_id = mlflow_conn_id
        self.aws_conn_id = aws_conn_id
        self.input_aws_conn_id = input_aws_conn_id or aws_conn_id
        if not isinstance(allow_pickle, bool):
            raise ValueError(f"allow_pickle must be True or False, got {allow_pickle!r}")
        self.allow_pickle = allow_pickle
        self.engine_options = checked_options(engine, engine_options)
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._check_inputs(rendered=False)  # literal bad dates and partition values fail at parse too

    def _check_inputs(self, *, rendered: bool) -> None:
        """Refuse a bad partition value or date (only literal ones until templates are rendered)."""
        from airflow_provider_dltrain.utils.input_checks import check_dates, check_partition

        check_partition(self.partition, self.scoring.partition_formats, rendered=rendered)
        dates = {"model_as_of": self.model_as_of}
        if isinstance(self.model, dict):
            dates["model.champion_as_of"] = self.model.get("champion_as_of")
        check_dates(dates, rendered=rendered)

    def _tracking(self) -> TrackingConfig:
        from airflow_provider_dltrain.store.config import TrackingConfig

        if not self.mlflow_conn_id:
            return TrackingConfig()
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook  # type: ignore[import-not-found]
        from airflow_provider_dltrain.utils.snapshot import remembered

        conn_id = self.mlflow_conn_id
        return remembered(
            ("tracking", conn_id), lambda: MlflowHook(mlflow_conn_id=conn_id).get_tracking_config()
        )

    def _storage_options(self, conn_id: str | None, uri: str) -> dict[str, str] | None:
        from airflow_provider_dltrain.operators.task_context import storage_options_for

        return storage_options_for(conn_id, uri)

    def _input_ref(self) -> DeltaRef:
        from airflow_provider_dltrain.exceptions import InvalidSpecError
        from airflow_provider_dltrain.lake.ref import DeltaRef

        try:
            return DeltaRef.coerce(self.input)
        except InvalidSpecError as err:
            raise InvalidSpecError(f"input: {err}; pass the DeltaRef dict an upstream task returned") from err

    def run_spec(self, context: Context, chosen: ScoringModel, tracking: TrackingConfig) -> RunSpec:
        """The stage as a :class:`RunSpec`: the model pinned to one version and where its files are."""
        import dataclasses

        from airflow_provider_dltrain.engines import LOCAL, RunSpec
        from airflow_provider_dltrain.lake.partition import validate_partition
        from airflow_provider_dltrain.operators.engine_run import identity_from
        from airflow_provider_dltrain.operators.task_context import commit_metadata_from
        from airflow_provider_dltrain.store.config import strip_userinfo

        model = chosen.to_dict()
        if self.engine != LOCAL:
            from airflow_provider_dltrain.inference.model import artifact_location, require_loadable

            require_loadable(chosen, tracking, allow_pickle=self.allow_pickle)  # before any job starts
            model["load_uri"] = artifact_location(chosen, tracking)
        return RunSpec(
            stage="score",
            table_uri=self.table_uri,
            partition=validate_partition(self.partition, formats=self.scoring.partition_formats),
            params={
                "model": model,
                "input": self._input_ref().to_dict(),
                "input_filter": self.input_filter,
                "scoring": dataclasses.asdict(self.scoring),
                "allow_pickle": self.allow_pickle,
                # A job needs no tracking credentials: it loads ``load_uri`` with its own role.
                "tracking_uri": strip_userinfo(tracking.tracking_uri),
                "registry_uri": strip_userinfo(tracking.registry_uri),
            },
            identity=identity_from(context),
            metadata=commit_metadata_from(context),
        )

    def rerun_check(self) -> tuple[RerunCheck, ScoringModel, TrackingConfig, dict[str, Any]]:
        """The model resolved for this run and whether scoring with it would rewrite the partition
        unchanged: what ``execute`` and the backfill plan both decide with
        (:func:`~airflow_provider_dltrain.etl.rerun_check.check_score`); no model is loaded."""
        from airflow_provider_dltrain.etl.inputs import check_filters
        from airflow_provider_dltrain.inference import resolve_scoring_model

        self._check_inputs(rendered=True)
        ref = self._input_ref()
        check_filters(self.input_filter, "input_filter")
        tracking = self._tracking()
        chosen = resolve_scoring_model(self.model, tracking, self.model_as_of or None, field="model")
        self.log.info("model %s resolved to %s", self.model, chosen.model_uri)
        storage = {
            ref.uri: self._storage_options(self.input_aws_conn_id, ref.uri),
            self.table_uri: self._storage_options(self.aws_conn_id, self.table_uri),
        }
        return self._rerun_check(chosen, ref, storage.get), chosen, tracking, storage

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.jobs.stages import run_stage

        with fail_fast_on_user_error():
            rerun, chosen, tracking, storage = self.rerun_check()
            self.log.info("%s", rerun.reason)
            if rerun.result is not None:  # unchanged: no model load, no Spark session, no job
                return self._done(context, rerun.result)
            spec = rerun.apply(self.run_spec(context, chosen, tracking))
            result = self.run_stage_on_engine(
                context,
                spec,
                lambda: run_stage(spec, storage=storage.get, tracking=tracking),
            )
        return self._done(context, result)

    def _rerun_check(self, chosen: ScoringModel, ref: DeltaRef, storage: Any) -> RerunCheck:
        import dataclasses

        from airflow_provider_dltrain.etl.rerun_check import check_score
        from airflow_provider_dltrain.lake.partition import validate_partition
        from airflow_provider_dltrain.utils.input_checks import check_force

        params = {
            "model": chosen.to_dict(),
            "input": ref.to_dict(),
            "input_filter": self.input_filter,
            "scoring": dataclasses.asdict(self.scoring),
            "allow_pickle": self.allow_pickle,
        }
        partition = validate_partition(self.partition, formats=self.scoring.partition_formats)
        force = check_force(self.force, rendered=True)
        return check_score(self.table_uri, partition, params, storage, force=force)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        with fail_fast_on_user_error():
            result = self.resume_from_trigger(context, event)
        return self._done(context, result)

    def on_kill(self) -> None:
        self.kill_job()

    def _done(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        self.log.info(
            "%s model %s v%s into %s version %d",
            "unchanged: already scored with" if result.get("skipped") else "scored with",
            result.get("model_name"),
            result.get("model_version"),
            result["uri"],
            result["version"],
        )
        extra: dict[str, Any] = {
            "uri": result["uri"],
            "version": result["version"],
            "partition": dict(self.partition),
            "model_name": result.get("model_name"),
            "model_version": result.get("model_version"),
        }
        for outlet in self.outlets or []:
            if getattr(outlet, "uri", None) is not None:
                context["outlet_events"][outlet].extra = extra
        self._keep_for_lineage(result, input=self._input_ref().to_dict(), tracking_uri=self._tracking_uri())
        keys = ("uri", "version", "timestamp", "committed", "skipped", "reason")
        return {k: result[k] for k in keys if k in result}

    def _tracking_uri(self) -> str | None:
        try:
            return self._tracking().tracking_uri
        except Exception:  # lineage must never fail a task that succeeded
            return None

    def _lineage_datasets(self, result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """OpenLineage: the scored input version and the model version in, the prediction version out."""
        from airflow_provider_dltrain.operators.openlineage import delta_dataset, registered_model_dataset

        scored = result["input"]
        inputs = [delta_dataset(scored["uri"], scored["version"])]
        if result.get("model_name") and result.get("model_version") is not None:
            inputs.append(
                registered_model_dataset(
                    result["tracking_uri"], result["model_name"], result["model_version"]
                )
            )
        return inputs, [delta_dataset(result["uri"], result["version"])]
