"""Fixtures for the Delta version sensor, its trigger and hook: real tables, real moto server."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from airflow_provider_dltrain.lake.ref import DeltaRef

Writer = Callable[..., DeltaRef]


@pytest.fixture
def write_version() -> Writer:
    """Commit one small partition overwrite to a table; returns the new version's ``DeltaRef``.

    Every call writes new values: a re-write of identical rows would commit nothing.
    """
    calls = iter(range(1_000_000))

    def write(uri: str, ds: str, rows: int = 2, storage_options: dict[str, str] | None = None) -> DeltaRef:
        import pyarrow as pa

        from airflow_provider_dltrain.lake import overwrite_partition

        base = next(calls) * 1000
        data = pa.table({"x": pa.array(range(base, base + rows), pa.int64())})
        return overwrite_partition(uri, data, {"ds": ds}, storage_options=storage_options)

    return write


@pytest.fixture
def table_uri(tmp_path) -> str:
    return str(tmp_path / "events")


@pytest.fixture
def aws_moto_conn(monkeypatch, moto_server) -> str:
    """An Amazon provider ``aws`` connection to the moto server, defined through the environment."""
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": moto_server, "region_name": "us-east-1", "delta_allow_unsafe_rename": True},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_MOTO", json.dumps(conn))
    return "aws_moto"
