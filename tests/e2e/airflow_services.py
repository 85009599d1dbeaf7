"""Start a real Airflow (api-server, scheduler, dag-processor; LocalExecutor) on 127.0.0.1 for a test.

Every process runs in its own process group and is killed at the end, also when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import free_port, migrated_airflow_db, wait_for_port

# The login a test with ``login=True`` uses, in the UI and for the REST API.
USER, PASSWORD = "admin", "admin"


class AirflowApi:
    def __init__(self, base: str, env: dict[str, str] | None = None) -> None:
        self.base = base.rstrip("/")
        self.env = dict(env or {})  # the services' environment, to start more Airflow processes alike
        self.token: str | None = None

    def log_in(self, user: str = USER, password: str = PASSWORD) -> None:
        """Get a JWT from ``POST /auth/token`` and send it with every later call."""
        self.token = self.call("POST", "/auth/token", {"username": user, "password": password})[
            "access_token"
        ]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(f"{self.base}{path}", data=data, method=method, headers=headers)
        # A read may wait long for the SQLite lock on a busy machine; asking again is harmless.
        for attempt in range(3 if method == "GET" else 1):
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    text = resp.read().decode()
                break
            except urllib.error.HTTPError as err:
                raise AssertionError(f"{method} {path} -> {err.code}: {err.read().decode()[:500]}") from err
            except TimeoutError:
                if attempt == 2 or method != "GET":
                    raise
        return json.loads(text) if text else None


@contextlib.contextmanager
def airflow_services(
    home: Path, env_extra: dict[str, str], log_dir: Path, login: bool = False
) -> Iterator[AirflowApi]:
    """Yield a client of the api-server. ``login=True``: a login page and a token, user ``USER``."""
    port = free_port()
    env = dict(os.environ)
    env.update(env_extra)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            # the default 8793 may be taken by another Airflow on this machine
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            # 5 s by default: on a busy machine a task's start call times out, is retried, and the
            # retry is refused because the first call did start it - the try fails for nothing
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        }
    )
    home.mkdir(parents=True, exist_ok=True)
    if login:
        # the simple auth manager only generates passwords for users missing from this file
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({USER: PASSWORD}))
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "False"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{USER}:admin"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(passwords)
    log_dir.mkdir(parents=True, exist_ok=True)
    migrated_airflow_db(env)
    procs: list[subprocess.Popen] = []
    try:
        # the api-server first: tasks queued before it listens would fail to reach the execution API
        for name, args in (
            ("api-server", ["api-server", "--port", str(port)]),
            ("dag-processor", ["dag-processor"]),
            ("scheduler", ["scheduler"]),
        ):
            out = open(log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "airflow", *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            if name == "api-server":
                wait_for_port(port, timeout=120, proc=procs[0])
        api = AirflowApi(f"http://127.0.0.1:{port}", env)
        if login:
            api.log_in()
        yield api
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def wait_for_dag(api: AirflowApi, dag_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError):
            api.call("GET", f"/api/v2/dags/{dag_id}")
            return
        time.sleep(2)
    raise TimeoutError(f"{dag_id} was not parsed within {timeout}s")


def wait_for_backfill(
    api: AirflowApi, backfill_id: int, dag_id: str, expected_runs: int, timeout: float
) -> list[dict]:
    deadline = time.monotonic() + timeout
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?run_type=backfill&limit=100")["dag_runs"]
        done = [r for r in runs if r["state"] in ("success", "failed")]
        backfill = api.call("GET", f"/api/v2/backfills/{backfill_id}")
        if len(done) >= expected_runs and backfill.get("completed_at"):
            return runs
        time.sleep(5)
    raise TimeoutError(f"backfill {backfill_id} of {dag_id} did not finish in {timeout}s: {runs}")
