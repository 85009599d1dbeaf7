"""A fake AWS for tests: moto as the control plane, local processes as the data plane.

Run ``python -m tests.support.fake_aws --port 0`` from the repository root. It prints one line
``READY http://127.0.0.1:<port>`` on stdout and serves until SIGTERM/SIGINT, then kills the jobs it
started and exits 0. Everything else goes to stderr, so a parent may stop reading stdout after READY.

Why one process: moto's backends, its response classes and its module globals can only be patched in
the process that serves the requests (a ``python -m moto.server`` child cannot be reached), and the
executor reads the same backend objects the server writes. What each service does is described in
``fake_glue``, ``fake_emr``, ``fake_emr_serverless``, ``fake_sagemaker`` and ``fake_ec2``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

# moto's botocore session must not pick up a developer's profile or real credentials.
os.environ.pop("AWS_PROFILE", None)
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from moto.server import ThreadedMotoServer

from tests.support import fake_ec2, fake_emr, fake_emr_serverless, fake_glue, fake_sagemaker, moto_server
from tests.support.local_executor import LocalCloudExecutor

log = logging.getLogger("fake_aws")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_aws", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--poll", type=float, default=0.1, help="executor poll interval in seconds")
    parser.add_argument(
        "--workdir", type=Path, help="keep job scripts and logs here (default: a temp dir, removed)"
    )
    parser.add_argument("--verbose", action="store_true", help="log every job start and end to stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s fake_aws %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    moto_server.install()  # conditional puts (every Delta commit) atomic, as on S3
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"

    executor = LocalCloudExecutor(endpoint, poll_s=args.poll, workdir=args.workdir)
    fake_glue.install(executor)
    fake_emr.install(executor)
    fake_emr_serverless.install(executor)
    fake_sagemaker.install(executor)
    fake_ec2.install(executor)
    executor.start()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    print(f"READY {endpoint}", flush=True)
    # Nothing else belongs on stdout: a parent that stopped reading it must never block us.
    sys.stdout = sys.stderr
    stop.wait()

    executor.stop()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
