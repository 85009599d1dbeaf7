"""Register a trained model in MLflow and promote it only if it beats the champion for its cut-off."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.operators.openlineage import LineageResultMixin
from airflow_provider_dltrain.operators.task_context import run_info
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error
from airflow_provider_dltrain.utils.input_checks import check_dates

if TYPE_CHECKING:
    from airflow_provider_dltrain.registry.evaluate import GateEvaluation


class RegisterModelOperator(LineageResultMixin, BaseOperator):
    """Register ``train_result``'s model, gate it against the champion, return a ModelRef dict.

    With ``evaluate_fn`` the gate is fair: the new version and the champion for its cut-off are
    loaded from MLflow and scored by that one function on the same rows (by default the new
    version's own training data, e.g. its held-out validation split; or a fixed table version in
    ``evaluation_dataset``). Without it, each version's recorded metric is compared, each measured
    on its own validation rows (a warning says so). For the demo model::

        RegisterModelOperator(
            task_id="register",
            train_result=trained.output,
            model_name="dltrain_digits",
            metric="val_accuracy",
            mode="max",
            data_cutoff="{{ data_interval_start | ds }}",
            evaluate_fn="airflow_provider_dltrain.demo.digits_model:evaluate_model",
        )

    Idempotent: re-running the task for the same training run reuses the version and replays the
    recorded decision (nothing is scored again). The live ``alias`` moves only if the gate passes
    and no later data cut-off was promoted, so a backfill of an old date never takes the alias from
    today's champion; it becomes champion for its own date (see ``registry.champion_as_of``).

    Returns ``{name, version, alias, promoted, reason, champion_version, compared_with,
    data_cutoff, model_uri, candidate_value, champion_value, basis, eval_rows}``: ``alias`` is set
    when this version holds the live alias; ``champion_version`` is the champion for this cut-off
    after the decision; ``basis`` is ``"rescored"`` or ``"recorded"``.

    :param train_result: TrainResult dict ``{run_id, model_uri, metrics, dataset, params}``, usually
        the training task's XComArg (templated). ``None`` (what the XComArg of a training task that
        skipped resolves to) skips this task: nothing was trained, so nothing is registered. With
        ``trigger_rule="none_failed"`` the task then skips itself at once, instead of waiting for
        Airflow to propagate the skip (one scheduler pass), and the tasks after it start sooner.
    :param model_name: registered model name (templated).
    :param metric: metric the gate compares, a key of ``train_result["metrics"]`` and, when
        re-scoring, of what ``evaluate_fn`` returns (templated).
    :param mode: ``"min"`` (lower is better) or ``"max"`` (templated).
    :param min_delta: minimum improvement over the champion to promote (templated).
    :param data_cutoff: ``YYYY-MM-DD`` cut-off of the training data; default: the MLflow run's
        ``dltrain.data_cutoff`` tag (templated).
    :param alias: the live alias to move on promotion (templated).
    :param mlflow_conn_id: ``mlflow`` connection; when it does not exist the embedded store is used.
    :param evaluate_fn: ``"package.module:function"`` with ``evaluate(ctx, model) -> dict[str, float]``;
        ``ctx`` is a single-process CPU ``TrainContext`` whose ``hparams`` are the training run's
        (templated).
    :param evaluation_dataset: a fixed evaluation table version, a DeltaRef dict or XComArg; default
        the new version's training data (templated).
    :param evaluation_filter: DNF filter on ``evaluation_dataset``, e.g.
        ``[["ds", "<=", "{{ data_interval_start | ds }}"]]`` (templated).
    :param aws_conn_id: ``aws`` connection for an ``s3://`` evaluation table (ignored for local paths).
    :param gate_policy: promotion policies on top of ``metric``/``mode``/``min_delta``, a dict or its
        JSON (templated): ``min_value``/``max_value`` (an absolute floor/ceiling),
        ``min_absolute_change``/``min_relative_change``/``greater_is_better`` (MLflow
        ``MetricThreshold`` semantics), ``ties`` (``"reject"``, the default, or ``"later_cutoff"``)
        and ``secondary`` (``[{"metric", "mode", "role": "tiebreak" | "no_regress",
        "max_regression"}]``); see :class:`~airflow_provider_dltrain.registry.GateSpec`. E.g. a
        saturating accuracy that should still move to models trained on more data::

            gate_policy={"min_value": 0.9, "ties": "later_cutoff",
                         "secondary": [{"metric": "val_loss", "mode": "min", "role": "tiebreak"}]}
    :param allow_pickle: let the gate load a champion or candidate saved in PyTorch's pickle format
        (loading it runs the code it carries; logged as a warning). Default: refused with a message
        saying how to re-log the model as a pt2 export.
    """

    template_fields: Sequence[str] = (
        "train_result",
        "model_name",
        "metric",
        "mode",
        "min_delta",
        "data_cutoff",
        "alias",
        "evaluate_fn",
        "evaluation_dataset",
        "evaluation_filter",
        "gate_policy",
    )
    template_fields_renderers = {
        "evaluation_dataset": "json",
        "evaluation_filter": "json",
        "gate_policy": "json",
    }
    ui_color = "#d9ecff"

    def __init__(
        self,
        *,
        train_result: Any,
        model_name: str,
        metric: str,
        mode: str = "min",
        min_delta: float | str = 0.0,
        data_cutoff: str | None = None,
        alias: str = "champion",
        mlflow_conn_id: str = "mlflow_default",
        evaluate_fn: str | None = None,
        evaluation_dataset: Any = None,
        evaluation_filter: Any = None,
        aws_conn_id: str | None = None,
        allow_pickle: bool = False,
        gate_policy: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(allow_pickle, bool):
            raise ValueError(f"allow_pickle must be True or False, got {allow_pickle!r}")
        self.allow_pickle = allow_pickle
        self.train_result = train_result
        self.model_name = model_name
        self.metric = metric
        self.mode = mode
        self.min_delta = min_delta
        self.data_cutoff = data_cutoff
        check_dates({"data_cutoff": data_cutoff}, rendered=False)  # a literal bad date: refused at parse
        self.alias = alias
        self.mlflow_conn_id = mlflow_conn_id
        self.evaluate_fn = evaluate_fn
        self.evaluation_dataset = evaluation_dataset
        self.evaluation_filter = evaluation_filter
        self.aws_conn_id = aws_conn_id
        self.gate_policy = gate_policy

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.registry import GateSpec, register_and_promote

        if self.train_result is None:
            from airflow_provider_dltrain.airflow_compat import AirflowSkipException

            raise AirflowSkipException(
                "nothing to register: train_result is None (the training task skipped)"
            )
        with fail_fast_on_user_error():
            check_dates({"data_cutoff": self.data_cutoff}, rendered=True)
            result = _train_result(self.train_result)
            metrics = result["metrics"]
            gate = GateSpec.with_policy(self.metric, self.mode, self.min_delta, _policy(self.gate_policy))
            if gate.metric not in metrics:
                raise InvalidSpecError(
                    f"metric {gate.metric!r} is not in train_result['metrics'] (has {sorted(metrics)}): set "
                    f"metric= to one of them or log {gate.metric!r} in the training function."
                )
            evaluation = self._evaluation(result)
            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
            info = run_info(context)
            outcome = register_and_promote(
                tracking,
                model_name=self.model_name,
                model_uri=result["model_uri"],
                run_id=result.get("run_id"),
                metrics=metrics,
                gate=gate,
                data_cutoff=self.data_cutoff or None,
                alias=self.alias,
                registration_key=f"{info['dag_id']}/{info['run_id']}" if info["run_id"] else None,
                evaluation=evaluation,
                params=result.get("params") or None,
            )
        ref = outcome.to_model_ref()
        self._log_outcome(ref)
        self._keep_for_lineage(ref, train_result=result, tracking_uri=tracking.tracking_uri)
        return ref

    def _lineage_datasets(self, result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """OpenLineage: the trained model (and its data) in, the registered model version out."""
        from airflow_provider_dltrain.operators.openlineage import (
            delta_dataset,
            registered_model_dataset,
            trained_model_dataset,
        )

        trained, uri = result["train_result"], result["tracking_uri"]
        inputs = [trained_model_dataset(uri, trained["model_uri"], trained.get("run_id"))]
        if isinstance(trained.get("dataset"), dict):
            inputs.append(delta_dataset(trained["dataset"]["uri"], trained["dataset"]["version"]))
        outputs = []
        if result.get("version") is not None:
            outputs.append(registered_model_dataset(uri, result["name"], result["version"]))
        return inputs, outputs

    def _log_outcome(self, ref: Mapping[str, Any]) -> None:
        """One task-log line: decision, reason, both gate values and their basis, where the alias is."""
        self.log.info(
            "%s v%s %s for data cut-off %s: %s. %s %s: candidate %s, champion %s%s. "
            "Live alias %r %s; champion for this cut-off: v%s.",
            ref["name"],
            ref["version"],
            "PROMOTED" if ref["promoted"] else "REJECTED",
            ref["data_cutoff"],
            ref["reason"],
            str(ref["basis"]).capitalize(),
            self.metric,
            ref["candidate_value"],
            ref["champion_value"],
            f" on {ref['eval_rows']} rows" if ref["eval_rows"] else "",
            self.alias,
            "points here" if ref["alias"] else "unchanged",
            ref["champion_version"],
        )

    def _evaluation(self, result: Mapping[str, Any]) -> GateEvaluation | None:
        """The gate's :class:`GateEvaluation`, or None to compare recorded metrics."""
        from airflow_provider_dltrain.lake.ref import DeltaRef
        from airflow_provider_dltrain.operators.task_context import storage_options_for
        from airflow_provider_dltrain.registry import GateEvaluation

        dataset = DeltaRef.coerce(self.evaluation_dataset) if self.evaluation_dataset else None
        if not self.evaluate_fn:
            if dataset is not None or self.evaluation_filter:
                raise InvalidSpecError(
                    "evaluation_dataset/evaluation_filter need evaluate_fn='package.module:function' "
                    "to score the models with."
                )
            return None
        table = dataset or (DeltaRef.coerce(result["dataset"]) if result.get("dataset") else None)
        storage = storage_options_for(self.aws_conn_id, table.uri) if table is not None else None
        return GateEvaluation(
            evaluate_fn=self.evaluate_fn,
            dataset=dataset,
            data_filter=self.evaluation_filter or None,
            storage_options=storage,
            allow_pickle=self.allow_pickle,
        )


def _policy(value: Any) -> dict[str, Any] | None:
    """``gate_policy`` as a dict; a rendered ``{{ ... | tojson }}`` template arrives as JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError as err:
            raise InvalidSpecError(f"gate_policy is text but not JSON: {value[:200]!r}") from err
    if value is not None and not isinstance(value, Mapping):
        raise InvalidSpecError(f"gate_policy must be a dict, got {type(value).__name__}.")
    return dict(value) if value else None


def _train_result(value: Any) -> dict[str, Any]:
    """The TrainResult dict, checked for what registration needs (JSON text is accepted too)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise InvalidSpecError(f"train_result is text but not JSON: {value[:200]!r}") from err
    if not isinstance(value, Mapping):
        raise InvalidSpecError(
            f"train_result must be the training task's result dict, got {type(value).__name__}."
        )
    if not value.get("model_uri"):
        raise InvalidSpecError("train_result has no 'model_uri': pass the training task's output (XComArg).")
    metrics = value.get("metrics") or {}
    if not isinstance(metrics, Mapping):
        raise InvalidSpecError(f"train_result['metrics'] must be a dict, got {type(metrics).__name__}.")
    return {**value, "metrics": dict(metrics)}
