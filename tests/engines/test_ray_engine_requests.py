"""RayEngine's request and options, without a cluster (the client is made on first use)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_dltrain.engines import get_engine
from airflow_provider_dltrain.engines.base import StagedRun
from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.engines.train_spec import SECRET_ENV, TrainJobSpec
from airflow_provider_dltrain.exceptions import InvalidSpecError

OPTIONS = {"address": "http://ray-head:8265", "staging_uri": "/shared/dl train", "num_workers": 3}
IDENTITY = RunIdentity(dag_id="nightly", run_id="scheduled__2026-12-01", task_id="train", try_number=2)


def _staged() -> StagedRun:
    spec = TrainJobSpec(
        train_fn="pkg.model:train",
        dataset={"uri": "/lake/digits", "version": 3},
        data_filter=[],
        hparams={"epochs": 1},
        seed=7,
        world_size=3,
        data_fingerprint="f" * 64,
        identity=IDENTITY,
        result_uri="/shared/dl train/runs/k/2/result.json",
    )
    return StagedRun(spec, "/shared/dl train/runs/k/2/spec.json", "s", "c", spec.result_uri)


def _engine(**options):
    return get_engine(
        "ray",
        lambda service: pytest.fail(f"no AWS client is needed, asked for {service}"),
        {**OPTIONS, **options},
    )


def test_the_submission_carries_the_task_identity_the_quoted_spec_and_the_driver_options():
    engine = _engine(placement_strategy="SPREAD", environment={"TZ": "UTC"})
    assert engine.world_size == 3
    request = engine.request(_staged(), "/tmp/wd")
    assert request["submission_id"] == IDENTITY.job_name and request["submission_id"].endswith("-t2")
    assert request["entrypoint"] == "python job_script.py --spec '/shared/dl train/runs/k/2/spec.json'"
    assert request["metadata"]["dltrain:task_key"] == IDENTITY.task_key
    assert request["metadata"]["dltrain.result_uri"] == "/shared/dl train/runs/k/2/result.json"
    env = request["runtime_env"]["env_vars"]
    assert env["DLTRAIN_ENGINE"] == "ray" and env["TZ"] == "UTC"
    assert json.loads(env["DLTRAIN_RAY_TRAIN"])["placement_strategy"] == "SPREAD"
    assert request["runtime_env"]["working_dir"] == "/tmp/wd" and request["entrypoint_num_cpus"] == 0


def test_mlflow_credentials_go_to_the_job_only_when_no_secret_names_them():
    plain = _engine()
    plain.set_job_credentials({"MLFLOW_TRACKING_TOKEN": "tok-123", "OTHER": "x"})
    env = plain.request(_staged(), "/tmp/wd")["runtime_env"]["env_vars"]
    assert env["MLFLOW_TRACKING_TOKEN"] == "tok-123" and "OTHER" not in env
    secret = _engine(tracking_secret="dltrain/mlflow")
    secret.set_job_credentials({"MLFLOW_TRACKING_TOKEN": "tok-123"})
    env = secret.request(_staged(), "/tmp/wd")["runtime_env"]["env_vars"]
    assert env[SECRET_ENV] == "dltrain/mlflow" and "tok-123" not in json.dumps(env)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"address": "ray-head:10001"}, "address must be the Ray dashboard's URL"),
        ({"num_workers": 0}, "num_workers must be >= 1"),
        ({"placement_strategy": "ANYWHERE"}, "placement_strategy must be one of"),
        ({"runtime_env": {"working_dir": "."}}, "may not set working_dir"),
        ({"staging_uri": ""}, "staging_uri is required"),
        ({"headers": {"Authorization": "x"}}, "unknown engine option 'headers' for engine 'ray'"),
    ],
)
def test_bad_options_fail_before_anything_is_submitted(options, message):
    with pytest.raises(InvalidSpecError, match=message):
        _engine(**options)


def test_the_driver_turns_every_restart_of_ray_train_off():
    pytest.importorskip("ray.train")
    from ray.train import FailureConfig

    from airflow_provider_dltrain.jobs.ray_driver import _no_restarts

    limits = _no_restarts(FailureConfig)
    assert limits["max_failures"] == 0 and set(limits.values()) == {0}
    FailureConfig(**limits)  # every name is one this Ray knows


def test_a_dropped_connection_is_tried_again_twice_then_fails_the_try_naming_the_call(caplog):
    import requests

    from airflow_provider_dltrain.engines import JobFailedError

    engine, sleeps, calls = _engine(), [], []
    engine._sleep = sleeps.append

    def flaky(answer_on: int):
        def call(job_id):
            calls.append(job_id)
            if len(calls) < answer_on:
                raise requests.ConnectionError("connection reset")
            return "RUNNING"

        return call

    assert engine._call("get_job_status", flaky(3), "j1") == "RUNNING"
    assert (calls, sleeps) == (["j1"] * 3, [2.0, 5.0])
    assert caplog.text.count("did not answer get_job_status (connection reset): trying again") == 2

    calls.clear()
    sleeps.clear()
    with pytest.raises(JobFailedError, match=r"did not answer get_job_status: connection reset$") as err:
        engine._call("get_job_status", flaky(99), "j2")
    assert isinstance(err.value.__cause__, requests.ConnectionError) and len(calls) == 3

    def refused(job_id):
        calls.append(job_id)
        raise RuntimeError("the cluster answered: no such job")

    calls.clear()
    with pytest.raises(RuntimeError, match="no such job"):
        engine._call("get_job_status", refused, "j3")
    assert calls == ["j3"]


def test_the_jobs_api_client_carries_the_clusters_token_whenever_ray_was_imported(tmp_path):
    """Ray reads RAY_AUTH_MODE once, at import: the engine reads the token when it makes a client."""
    from airflow_provider_dltrain.engines.ray_jobs import ray_auth_headers

    token = tmp_path / "auth_token"
    token.write_text("f00d" * 16 + "\n")
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    assert ray_auth_headers(env) == {"Authorization": "Bearer " + "f00d" * 16}
    assert ray_auth_headers({**env, "RAY_AUTH_TOKEN": "given"}) == {"Authorization": "Bearer given"}
    assert ray_auth_headers({"RAY_AUTH_MODE": "disabled"}) == {}
    with pytest.raises(InvalidSpecError, match="RAY_AUTH_TOKEN_PATH"):
        ray_auth_headers({**env, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})
