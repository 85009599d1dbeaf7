"""``EngineHook``: boto3 clients for the engine adapters, from one Airflow ``aws`` connection."""

from __future__ import annotations

from typing import Any

from airflow_provider_dltrain.engines import Engine, get_engine


class EngineHook:
    """Builds engine adapters whose boto3 clients come from ``aws_conn_id`` (endpoint, region, role).

    Everything about credentials is the Amazon provider's ``AwsBaseHook``; this only hands its
    clients to the adapters, which import no Airflow.

    :param aws_conn_id: Airflow ``aws`` connection (``None``: boto3's default credential chain).
    :param region_name: overrides the connection's region.
    """

    def __init__(self, aws_conn_id: str | None = "aws_default", region_name: str | None = None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

            hook = AwsBaseHook(
                aws_conn_id=self.aws_conn_id, client_type=service, region_name=self.region_name
            )
            self._clients[service] = hook.conn
        return self._clients[service]

    @property
    def region(self) -> str | None:
        return self.region_name or self.client("s3").meta.region_name

    def get_engine(self, name: str, options: Any = None) -> Engine:
        """The adapter ``name`` with ``options`` (a mapping or its options object); the console region
        of a place in an AWS region defaults to the connection's."""
        from airflow_provider_dltrain.engines.placement import PLACES, with_region

        where = PLACES.get(name)
        region = self.region if where is not None and where.regional else None
        return get_engine(name, self.client, with_region(name, options, region))
