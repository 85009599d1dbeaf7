"""A notebook's local Ray cluster whose workers reach the fake AWS, trained on with backend="ray".

Start the fake AWS first in a shell: ``dltrain fake-aws --bucket my-lake --env-file fake-aws.env``.
"""


def main(env_file: str = "fake-aws.env") -> None:
    # --8<-- [start:cluster]
    import os

    from airflow_provider_dltrain.testing.ray_cluster import local_ray_cluster, read_env_file
    from airflow_provider_dltrain.training import run_training

    fake_aws = read_env_file(env_file)  # AWS_ENDPOINT_URL, the keys, the region, AIRFLOW_CONN_AWS
    os.environ.update(fake_aws)  # this process (the launcher) reaches the fake too
    with local_ray_cluster(nodes=2, env=fake_aws) as cluster:  # every Ray worker gets the variables
        # the cluster's Jobs API asks for its token (RAY_AUTH_MODE=token, the token's 0600 file)
        os.environ.update(cluster.env)
        result = run_training(
            "my_models.digits:train",
            {"uri": "s3://my-lake/lake/digits", "version": 0},
            {"epochs": 2, "batch_size": 16, "seed": 7},
            backend="ray",
            backend_options={
                "address": cluster.address,
                "staging_uri": "s3://my-lake/dltrain-staging",
                "num_workers": 2,
            },
        )
        print(result.metrics)
    # leaving the block stopped every process of the cluster (Ray's client proxy included)
    # --8<-- [end:cluster]


if __name__ == "__main__":
    main()
