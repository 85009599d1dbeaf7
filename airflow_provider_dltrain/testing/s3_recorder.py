"""A moto S3 server of its own on loopback whose request recorder counts what a piece of code asks of S3.

Every request reaches the server, so delta-rs's (Rust), pyarrow's and boto3's are counted alike::

    with recording_s3(tmp_path) as s3:
        requests = s3.requests(lambda: check_etl(spec, lambda _uri: s3.storage_options))

The server (``airflow_provider_dltrain.testing.moto_server``) is stopped on exit, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY = "testing"  # moto's server accepts any key; these are what the storage options carry
REGION = "us-east-1"


@dataclass
class RecordingS3:
    endpoint: str

    @property
    def storage_options(self) -> dict[str, str]:
        from airflow_provider_dltrain.lake.storage import s3_storage_options

        return s3_storage_options(
            access_key=KEY,
            secret_key=KEY,
            region=REGION,
            endpoint_url=self.endpoint,
            allow_unsafe_rename=True,
        )

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=KEY,
            aws_secret_access_key=KEY,
        ).create_bucket(Bucket=name)

    def _call(self, path: str, method: str = "POST") -> str:
        with urllib.request.urlopen(urllib.request.Request(self.endpoint + path, method=method)) as response:
            return str(response.read().decode())

    def requests(self, run: Callable[[], Any]) -> list[dict[str, Any]]:
        """The requests ``run()`` made (method, url, headers), in order."""
        self._call("/moto-api/recorder/reset-recording")
        self._call("/moto-api/recorder/start-recording")
        try:
            run()
        finally:
            self._call("/moto-api/recorder/stop-recording")
        text = self._call("/moto-api/recorder/download-recording", "GET")
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def recording_s3(folder: str | Path) -> Iterator[RecordingS3]:
    """Start the server (its recording in ``folder``), yield it, stop it."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_dltrain.testing.moto_server",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env=dict(os.environ, MOTO_RECORDER_FILEPATH=str(Path(folder) / "moto-recording")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto's server did not start on port {port} (exit {proc.poll()})")
            time.sleep(0.1)
        yield RecordingS3(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
