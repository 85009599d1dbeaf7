"""pytest fixtures for testing cloud DAGs against the fake AWS (registered as a ``pytest11`` plugin).

* ``fake_aws`` (per test): the session's fake AWS (``dltrain fake-aws``, started once in a child
  process), with this process pointed at it for the test: ``AIRFLOW_CONN_AWS`` (connection id ``aws``),
  ``AWS_ENDPOINT_URL``, the fake's keys (fresh random ones for each session, read from the 0600 file
  the fake wrote) and region (child processes such as ``airflow dags test`` inherit them), restored
  when the test ends, so tests that do not ask for it never talk to the fake. Yields a :class:`~airflow_provider_dltrain.testing.fake_aws_process.FakeAws`: ``endpoint_url``,
  ``conn_uri``, ``conn_json``, ``env``, ``client(service)``, ``create_bucket(name)``,
  ``create_emr_serverless_app(name)`` (its id), ``leaks()``, ``credentials``, ``env_file``.
* ``fake_aws_server`` (session): the same server without touching the environment.
* ``ray_cluster`` (per test module): a 2-node Ray cluster on 127.0.0.1 started with ``ray start``
  (:func:`~airflow_provider_dltrain.testing.ray_cluster.local_ray_cluster`); its nodes get the
  variables of the ``ray_cluster_env`` fixture (none by default; override it with
  ``fake_aws_server.env`` for Ray workers that reach the fake AWS). It runs with Ray's token
  authentication: set ``ray_cluster.env`` (the address, ``RAY_AUTH_MODE=token`` and the 0600 token
  file's path) where a test calls its Jobs API. At the end every process of the cluster is stopped,
  Ray's client proxy included, and the teardown fails if one is left.

At the end of the session the server is stopped, and the teardown fails if any job process it started
(a Glue run, an EMR step, a training job…) is still alive. The server's log and each job's stdout and
stderr are kept under pytest's temporary directory (``fake_aws.log``, ``jobs/``).

Importing this module loads neither moto nor boto3: a suite that uses no fixture pays nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow_provider_dltrain.testing.fake_aws_process import FakeAws
    from airflow_provider_dltrain.testing.ray_cluster import LocalRayCluster


@pytest.fixture(scope="session")
def fake_aws_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAws]:
    """A running fake AWS, the environment left alone; stopped (and checked) at the end of the session."""
    from airflow_provider_dltrain.testing.fake_aws_process import start_fake_aws

    with start_fake_aws(tmp_path_factory.mktemp("fake-aws")) as fake:
        yield fake


@pytest.fixture
def fake_aws(fake_aws_server: FakeAws) -> Iterator[FakeAws]:
    """The fake AWS, with ``AIRFLOW_CONN_AWS`` and the ``AWS_*`` variables pointing at it for this test."""
    from airflow_provider_dltrain.testing.fake_aws_process import CLIENT_ENV_UNSET

    with pytest.MonkeyPatch.context() as mp:
        for name in CLIENT_ENV_UNSET:
            mp.delenv(name, raising=False)
        for name, value in fake_aws_server.env.items():
            mp.setenv(name, value)
        yield fake_aws_server


@pytest.fixture(scope="module")
def ray_cluster_env() -> dict[str, str]:
    """Variables the ``ray_cluster`` nodes (and so every Ray worker) get: override to add yours."""
    return {}


@pytest.fixture(scope="module")
def ray_cluster(ray_cluster_env: dict[str, str]) -> Iterator[LocalRayCluster]:
    """A 2-node, one-CPU-each Ray cluster on 127.0.0.1 for the module; none of its processes outlives it."""
    pytest.importorskip("ray", reason="the ray extra starts the cluster")
    from airflow_provider_dltrain.testing.ray_cluster import local_ray_cluster

    with local_ray_cluster(nodes=2, env=ray_cluster_env) as cluster:
        yield cluster
