"""boto3 clients for the fake AWS and the Airflow connection to it; shared by the engine tests."""

from __future__ import annotations

import boto3
from botocore.config import Config

from airflow_provider_dltrain.testing.fake_aws_process import connection_json

# A 500 from an unimplemented moto call is retried 4 times with backoff otherwise.
TEST_CONFIG = Config(retries={"max_attempts": 1})


def aws_client(service: str, endpoint: str):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=TEST_CONFIG,
    )


def aws_connection(endpoint: str) -> str:
    """An Airflow ``aws`` connection (as the JSON of an ``AIRFLOW_CONN_*`` variable) to the fake AWS."""
    return connection_json(endpoint)
