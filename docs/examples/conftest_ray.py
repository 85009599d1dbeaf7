"""A conftest.py whose Ray workers reach the fake AWS: the ray_cluster fixture's nodes get its variables."""

import pytest


# --8<-- [start:conftest]
@pytest.fixture(scope="module")
def ray_cluster_env(fake_aws_server):
    """Variables of every node of the module's ray_cluster (and so of every Ray worker)."""
    return fake_aws_server.env


def test_training_on_ray_reads_the_fake_s3(ray_cluster, fake_aws, monkeypatch):
    for name, value in ray_cluster.env.items():  # RAY_ADDRESS and the token the Jobs API asks for
        monkeypatch.setenv(name, value)
    fake_aws.create_bucket("my-lake")
    options = {"address": ray_cluster.address, "staging_uri": "s3://my-lake/staging", "num_workers": 2}
    assert options["address"].startswith("http://127.0.0.1:")
    # TrainModelOperator(..., backend="ray", backend_options=options, aws_conn_id="aws")
    # at the end of the module every process of the cluster is stopped and checked gone


# --8<-- [end:conftest]
