"""``DeltaLineageOperator``: log and return the lineage chain of a prediction table version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaLineageOperator(BaseOperator):
    """Trace a prediction table version back to its model, MLflow run, training data and ingest commit.

    :param table_uri: the prediction table (templated).
    :param version: its version, an int, a ``DeltaRef`` dict or XComArg (templated); default newest.
    :param mlflow_conn_id: ``mlflow`` connection; when missing the embedded store is used.
    :param aws_conn_id: ``aws`` connection for ``s3://`` tables that ``aws_conn_ids`` does not name.
    :param aws_conn_ids: table URI (or prefix, e.g. ``"s3://features-bucket"``) → ``aws`` connection,
        for training and input tables kept under other credentials than the prediction table.
    """

    template_fields: Sequence[str] = ("table_uri", "version")
    ui_color = "#eeeeee"

    def __init__(
        self,
        *,
        table_uri: str,
        version: Any = None,
        mlflow_conn_id: str = "mlflow_default",
        aws_conn_id: str | None = None,
        aws_conn_ids: dict[str, str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.version = version
        self.mlflow_conn_id = mlflow_conn_id
        self.aws_conn_id = aws_conn_id
        self.aws_conn_ids = dict(aws_conn_ids or {})

    def _version(self) -> int | None:
        """The version to trace: an int, a DeltaRef dict (or its rendered text), or None for the newest."""
        from airflow_provider_dltrain.exceptions import InvalidSpecError

        value = self.version
        if value in (None, ""):
            return None
        try:
            if isinstance(value, dict):
                return int(value["version"])
            if isinstance(value, str) and value.strip().startswith("{"):
                import ast

                return int(ast.literal_eval(value)["version"])
            return int(value)
        except (KeyError, TypeError, ValueError, SyntaxError) as err:
            raise InvalidSpecError(
                f"version={value!r:.120} is not a Delta version: pass an integer, a DeltaRef dict "
                "(e.g. the scoring task's XComArg) or None for the newest"
            ) from err

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.lineage import format_lineage, lineage
        from airflow_provider_dltrain.operators.task_context import storage_options_resolver

        with fail_fast_on_user_error():
            options_for = storage_options_resolver(self.aws_conn_id, self.aws_conn_ids)
            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
            chain = lineage(self.table_uri, self._version(), tracking, options_for=options_for)
        for line in format_lineage(chain).splitlines():
            self.log.info("%s", line)
        return chain
