"""Fixtures for cloud-engine tests: the shipped fake AWS (moto + local data plane) and a leak check.

``fake_aws_server`` (``airflow_provider_dltrain.testing.pytest_plugin``, loaded by tests/conftest.py)
runs the fake AWS in a child process: Glue job runs, EMR steps and EMR Serverless job runs submitted
to it really execute their S3 script locally. These tests keep the environment as it is and use its
endpoint explicitly.
"""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.testing.fake_aws_process import leaks


@pytest.fixture(scope="session")
def fake_aws_endpoint(fake_aws_server) -> str:
    """Endpoint URL of the session's fake AWS, whose jobs run locally."""
    return fake_aws_server.endpoint_url


@pytest.fixture
def aws_leak_check(fake_aws_endpoint):
    """Yields the endpoint; after the test, fails if a cluster, job run or application is left alive."""
    yield fake_aws_endpoint
    leaked = leaks(fake_aws_endpoint)
    assert not leaked, "cloud resources left running:\n  " + "\n  ".join(leaked)
