"""A fake AWS for offline tests: moto as the control plane, local processes as the data plane.

``dltrain fake-aws`` (or ``python -m airflow_provider_dltrain.testing.fake_aws``) serves S3, Glue,
EMR, EMR Serverless, SageMaker and EC2 on 127.0.0.1 and really runs what is submitted: Glue job
runs, EMR steps, EMR Serverless job runs, SageMaker training and processing jobs and EC2 user data
run as local processes. It creates the ``--bucket`` and ``--emr-serverless-app`` given, writes the
Airflow ``aws`` connection and the ``export AWS_...`` lines to use, secret included, to ``--env-file``
(mode 0600; a private temporary file when not given), prints them without the secret and the file's
path, then one line ``READY http://127.0.0.1:<port>`` on stdout, and serves until SIGTERM/SIGINT;
then it kills every job it started and exits 0. Everything after READY goes to stderr, so a parent
may stop reading stdout there.

Why one process: moto's backends, its response classes and its module globals can only be patched in
the process that serves the requests (a ``python -m moto.server`` child cannot be reached), and the
executor reads the same backend objects the server writes. What each service does is described in
``fake_glue``, ``fake_emr``, ``fake_emr_serverless``, ``fake_sagemaker``, ``fake_sagemaker_processing``
and ``fake_ec2``.

Every request must be SigV4-signed with the fake's credentials (``fake_aws_auth``), or it is refused
with 403 and nothing runs. Loopback is no boundary between the users of a machine, so the credentials
are fresh random ones at every start, unless ``DLTRAIN_FAKE_AWS_ACCESS_KEY_ID`` and
``DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY`` give the caller's own (read, then removed from this process's
environment). The well-known test keys ``testing``/``testing`` are refused unless
``--insecure-well-known-keys`` asks for them, and even then only on a loopback ``--host``. Jobs reach
the fake with those credentials and get no other variable of its environment that could hold a secret.

This module imports moto only when it serves: ``add_arguments`` is what the ``dltrain`` command reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import string
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.testing.fake_aws_auth import LOOPBACK, WELL_KNOWN_KEY
from airflow_provider_dltrain.testing.fake_aws_keys import ACCESS_KEY_ENV, INSTANCE_PROFILE, SECRET_KEY_ENV

log = logging.getLogger("fake_aws")
WELL_KNOWN_FLAG = "--insecure-well-known-keys"
# the AMI the EC2 engine resolves by default (any AMI id is accepted on the fake)
AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
# S3's rule for new buckets (moto accepts more, e.g. capitals, which S3 refuses)
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def bucket_name(text: str) -> str:
    if not BUCKET_NAME.match(text) or ".." in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free one)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container that other containers reach; "
        "never with the well-known test keys)",
    )
    parser.add_argument(
        WELL_KNOWN_FLAG,
        action="store_true",
        help=f"accept the well-known keys {WELL_KNOWN_KEY!r}/{WELL_KNOWN_KEY!r} instead of fresh random ones. "
        "INSECURE: any user or process of this machine can then run code as you through the fake's jobs; "
        "loopback --host only",
    )
    parser.add_argument(
        "--bucket",
        action="append",
        default=[],
        type=bucket_name,
        metavar="NAME",
        help="create this S3 bucket (repeatable)",
    )
    parser.add_argument(
        "--emr-serverless-app",
        action="append",
        default=[],
        metavar="NAME",
        help="create a Spark EMR Serverless application of this name and print its id (repeatable)",
    )
    parser.add_argument("--poll", type=float, default=0.1, help="executor poll interval in seconds")
    parser.add_argument(
        "--workdir", type=Path, help="keep job scripts and logs here (default: a temp dir, removed)"
    )
    parser.add_argument(
        "--pid-file",
        type=Path,
        help="append the process group id of every job started to this file (to check none outlives a stop)",
    )
    parser.add_argument(
        "--images",
        type=_images,
        metavar="JSON",
        help='run jobs in containers of these images: {"glue": TAG, "emr": TAG, "train": TAG} (inline or a '
        "file; docker/images.py prints it). Default: jobs run as processes of this machine's Python",
    )
    parser.add_argument(
        "--share",
        action="append",
        default=[],
        metavar="DIR",
        help="with --images: mount this host directory at the same path in every job container (repeatable)",
    )
    parser.add_argument(
        "--instance",
        help="with --images: the label value of every container and network this fake creates (default: random)",
    )
    parser.add_argument(
        "--env-file",
        type=Path,
        metavar="PATH",
        help="write the export lines (AIRFLOW_CONN_AWS and the AWS_* variables, the secret included) to "
        "this file, mode 0600, to source in a shell, a notebook or a Ray node's start script (default: a "
        "file in a private temporary directory, removed on exit; its path is printed)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every job start and end to stderr")


def _images(text: str) -> dict[str, str]:
    try:
        value = json.loads(Path(text).read_text() if not text.lstrip().startswith("{") else text)
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(
            f"--images: not a JSON object or a file holding one: {err}"
        ) from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise argparse.ArgumentTypeError('--images: expected {"glue": TAG, "emr": TAG, "train": TAG}')
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_dltrain.testing.fake_aws", description=__doc__
    )
    add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return serve(parse_args(argv))


def credentials_from_env(host: str, well_known: bool = False) -> tuple[str, str]:
    """(access key id, secret) the fake accepts: the caller's own taken out of the environment, else the
    well-known test keys when ``well_known`` asks for them, else fresh random ones. ValueError when half
    given, when the well-known keys are given without ``well_known``, or when they would be served on
    an address that is not loopback."""
    access_key = os.environ.pop(ACCESS_KEY_ENV, "")
    secret = os.environ.pop(SECRET_KEY_ENV, "")
    if bool(access_key) != bool(secret):
        raise ValueError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")
    if well_known and access_key and (access_key, secret) != (WELL_KNOWN_KEY, WELL_KNOWN_KEY):
        raise ValueError(f"{WELL_KNOWN_FLAG} and keys of your own in {ACCESS_KEY_ENV}: give one of them")
    if WELL_KNOWN_KEY in (access_key, secret) and not well_known:
        raise ValueError(
            f"the well-known test key {WELL_KNOWN_KEY!r} lets any user of this machine run code as you "
            f"through the fake's jobs: leave {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} unset for fresh random "
            f"keys, or pass {WELL_KNOWN_FLAG} if you accept that risk"
        )
    if well_known and host not in LOOPBACK:
        raise ValueError(
            f"--host {host} makes the fake reachable from other machines, and it runs the jobs it is sent: "
            f"the well-known test keys ({WELL_KNOWN_FLAG}) are accepted on a loopback address only"
        )
    if well_known:
        return WELL_KNOWN_KEY, WELL_KNOWN_KEY
    return (access_key, secret) if access_key else fresh_credentials()


def fresh_credentials() -> tuple[str, str]:
    """A random access key id (AWS's shape: 20 upper-case characters) and secret (40 characters)."""
    alphabet = string.ascii_uppercase + string.digits
    key = "AKFA" + "".join(secrets.choice(alphabet) for _ in range(16))
    return key, secrets.token_urlsafe(30)


def serve(args: argparse.Namespace) -> int:
    """Run the fake AWS until SIGTERM/SIGINT (see the module docstring); 0 once every job is stopped."""
    from airflow_provider_dltrain.exceptions import require

    require("moto.server", "testing")
    try:
        credentials = credentials_from_env(args.host, args.insecure_well_known_keys)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # moto's botocore session must not pick up a developer's profile or real credentials.
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_ENDPOINT_URL", None)  # the executor's own S3 client talks to this server
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = credentials
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s fake_aws %(levelname)s %(name)s: %(message)s",
        force=True,  # the dltrain command has configured logging already
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    from airflow_provider_dltrain.testing import (
        fake_ec2,
        fake_emr,
        fake_emr_serverless,
        fake_glue,
        fake_sagemaker,
        fake_sagemaker_processing,
        moto_server,
    )
    from airflow_provider_dltrain.testing.fake_aws_auth import Credentials, configure, gated_server
    from airflow_provider_dltrain.testing.local_executor import ContainerMode, LocalCloudExecutor

    moto_server.install()  # conditional puts (every Delta commit) atomic, as on S3
    configure(Credentials(*credentials))
    server = gated_server(args.host, args.port)
    host, port = server.get_host_and_port()
    endpoint = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"  # what this machine dials

    containers = None
    if args.images:
        extra = {"instance": args.instance} if args.instance else {}
        containers = ContainerMode(
            args.images, shares=tuple(str(Path(d).resolve()) for d in args.share), **extra
        )
    executor = LocalCloudExecutor(
        endpoint,
        poll_s=args.poll,
        workdir=args.workdir,
        pid_file=args.pid_file,
        containers=containers,
        credentials=credentials,
    )
    services = (fake_glue, fake_emr, fake_emr_serverless, fake_sagemaker, fake_sagemaker_processing, fake_ec2)
    for service in services:
        service.install(executor)
    executor.start()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        apps = _create_resources(endpoint, args.bucket, args.emr_serverless_app, credentials)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        executor.stop()
        server.stop()
        return 2
    # without --env-file: a file in a new private directory (mode 0700), removed on exit
    env_file: Path = args.env_file or Path(tempfile.mkdtemp(prefix="dltrain-fake-aws-")) / "fake_aws.env"
    _print_connection(endpoint, args.bucket, apps, credentials, env_file)
    # Nothing else belongs on stdout: a parent that stopped reading it must never block us.
    sys.stdout = sys.stderr
    print("serving; Ctrl-C or SIGTERM stops the fake AWS and every job it started", flush=True)
    stop.wait()

    executor.stop()
    server.stop()
    if args.env_file is None:
        shutil.rmtree(env_file.parent, ignore_errors=True)
    return 0


def _create_resources(
    endpoint: str, buckets: list[str], apps: list[str], credentials: tuple[str, str]
) -> dict[str, str]:
    """Create the buckets and EMR Serverless applications; {application name: id}. ValueError naming
    the option when the service refuses one."""
    from botocore.exceptions import BotoCoreError, ClientError

    from airflow_provider_dltrain.testing.fake_aws_process import client

    s3 = client("s3", endpoint, credentials=credentials)
    es = client("emr-serverless", endpoint, credentials=credentials)
    created: dict[str, str] = {}
    for name in buckets:
        try:
            s3.create_bucket(Bucket=name)
        except (BotoCoreError, ClientError) as err:
            raise ValueError(f"--bucket {name!r}: {err}; use a valid S3 bucket name") from err
    for name in apps:
        if name in created:
            raise ValueError(f"--emr-serverless-app {name!r} is given twice; give each name once")
        try:
            response = es.create_application(name=name, releaseLabel="emr-7.5.0", type="SPARK")
        except (BotoCoreError, ClientError) as err:
            raise ValueError(f"--emr-serverless-app {name!r}: {err}") from err
        created[name] = response["applicationId"]
    _create_instance_profile(client("iam", endpoint, credentials=credentials))
    return created


def _create_instance_profile(iam: Any) -> None:
    """The instance profile EC2 nodes run as (``engine_options["instance_profile"]``), with a role of
    the same name that EC2 may assume: what moto's RunInstances asks for, as AWS does."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    iam.create_role(RoleName=INSTANCE_PROFILE, AssumeRolePolicyDocument=json.dumps(trust))
    iam.create_instance_profile(InstanceProfileName=INSTANCE_PROFILE)
    iam.add_role_to_instance_profile(InstanceProfileName=INSTANCE_PROFILE, RoleName=INSTANCE_PROFILE)


def client_exports(endpoint: str, credentials: tuple[str, str], *, secret: bool = True) -> list[str]:
    """``export NAME=value`` lines that point a shell, a notebook or a Ray node (boto3, delta-rs,
    Airflow's ``aws`` connection) at the fake; without the secret (nor the connection, which holds it)
    unless ``secret``."""
    from airflow_provider_dltrain.testing.fake_aws_process import client_env

    env = client_env(endpoint, credentials)
    if not secret:
        env = {k: v for k, v in env.items() if k not in ("AWS_SECRET_ACCESS_KEY", "AIRFLOW_CONN_AWS")}
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def _print_connection(
    endpoint: str, buckets: list[str], apps: dict[str, str], credentials: tuple[str, str], env_file: Path
) -> None:
    """Write the exports to ``env_file`` (0600), then print what to use without the secret, then the
    READY line, in one write (a reader that stops at READY has it all)."""
    from airflow_provider_dltrain.testing.fake_aws_keys import write_private
    from airflow_provider_dltrain.testing.fake_aws_process import CONN_ID

    write_private(env_file, "\n".join(client_exports(endpoint, credentials)) + "\n")
    lines = [
        f"fake AWS: {endpoint} (S3, Glue, EMR, EMR Serverless, SageMaker, EC2; jobs run on this machine)"
    ]
    lines += [f"bucket: s3://{bucket}" for bucket in buckets]
    lines += [f"EMR Serverless application {name}: {app_id}" for name, app_id in apps.items()]
    lines += [
        f"EC2: instance profile {INSTANCE_PROFILE!r}; image_id: any AMI id, by default the one of SSM "
        f"parameter {AMI_PARAMETER}"
    ]
    lines += [
        f"credentials: access key id {credentials[0]}; the secret, AWS_SECRET_ACCESS_KEY and the Airflow "
        f"connection {CONN_ID!r} (AIRFLOW_CONN_{CONN_ID.upper()}) are in {env_file} (mode 0600): source it",
        "# for Airflow, a shell, a notebook or a Ray node (boto3, delta-rs), besides that file:",
        *client_exports(endpoint, credentials, secret=False),
        f"READY {endpoint}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
