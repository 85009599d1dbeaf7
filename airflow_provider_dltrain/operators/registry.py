"""Register a trained model in MLflow and promote it only if it beats the champion for its cut-off."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.utils.airflow_errors import fail_fast_on_user_error
from airflow_provider_dltrain.utils.context import run_info


class RegisterModelOperator(BaseOperator):
    """Register ``train_result``'s model, gate it against the champion, return a ModelRef dict.

    Idempotent: re-running the task for the same training run reuses the version and replays the
    recorded decision. The live ``alias`` moves only if the gate passes and no later data cut-off
    was promoted, so a backfill of an old date never takes the alias from today's champion; it
    becomes champion for its own date (see ``registry.champion_as_of``).

    Returns ``{name, version, alias, promoted, reason, champion_version, compared_with,
    data_cutoff, model_uri}``: ``alias`` is set when this version holds the live alias;
    ``champion_version`` is the champion for this cut-off after the decision.

    :param train_result: TrainResult dict ``{run_id, model_uri, metrics, dataset, params}``, usually
        the training task's XComArg (templated).
    :param model_name: registered model name (templated).
    :param metric: metric the gate compares, a key of ``train_result["metrics"]`` (templated).
    :param mode: ``"min"`` (lower is better) or ``"max"`` (templated).
    :param min_delta: minimum improvement over the champion to promote (templated).
    :param data_cutoff: ``YYYY-MM-DD`` cut-off of the training data; default: the MLflow run's
        ``dltrain.data_cutoff`` tag (templated).
    :param alias: the live alias to move on promotion (templated).
    :param mlflow_conn_id: ``mlflow`` connection; when it does not exist the embedded store is used.
    """

    template_fields: Sequence[str] = (
        "train_result",
        "model_name",
        "metric",
        "mode",
        "min_delta",
        "data_cutoff",
        "alias",
    )
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.train_result = train_result
        self.model_name = model_name
        self.metric = metric
        self.mode = mode
        self.min_delta = min_delta
        self.data_cutoff = data_cutoff
        self.alias = alias
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.registry import GateSpec, register_and_promote

        with fail_fast_on_user_error():
            result = _train_result(self.train_result)
            metrics = result["metrics"]
            gate = GateSpec(metric=self.metric, mode=self.mode, min_delta=self.min_delta)  # type: ignore[arg-type]
            if gate.metric not in metrics:
                raise InvalidSpecError(
                    f"metric {gate.metric!r} is not in train_result['metrics'] (has {sorted(metrics)}): set "
                    f"metric= to one of them or log {gate.metric!r} in the training function."
                )
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
            )
        ref = outcome.to_model_ref()
        self.log.info(
            "%s v%s %s for data cut-off %s: %s. Live alias %r %s; champion for this cut-off: v%s.",
            ref["name"],
            ref["version"],
            "PROMOTED" if ref["promoted"] else "REJECTED",
            ref["data_cutoff"],
            ref["reason"],
            self.alias,
            "points here" if ref["alias"] else "unchanged",
            ref["champion_version"],
        )
        return ref


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
