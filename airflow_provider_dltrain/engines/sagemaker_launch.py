"""The SageMaker container's entry point: start the job script on every rank of every host.

Uploaded as it is into the job's ``code`` channel, so it needs only the standard library (the
image brings torch, and for MPI mpirun, sshd and horovod). It reads what SageMaker writes into
every container - ``/opt/ml/input/config/resourceconfig.json`` (hosts, this host) and
``hyperparameters.json`` (``spec``, ``code``), or ``$SM_INPUT_CONFIG_DIR`` when set - and runs, like
the SageMaker SDK's own drivers:

- ``torchrun``: ``python -m torch.distributed.run --nnodes=H --nproc_per_node=P
  [--master_addr=<first host> --master_port=29500 --node_rank=i] job_script.py --spec ... --code ...``
  on every host;
- ``mpi`` (Horovod): the first host runs ``mpirun -np H*P --host h1:P,h2:P ... python job_script.py
  ...``; the other hosts run ``sshd`` and wait until the first host tells them the job ended. A
  single host runs ``mpirun --host localhost:P``: no SSH at all.
  Passwordless SSH between the hosts is the image's business (``docker/jobs/Dockerfile.train``).

The exit status is the job's: non-zero makes SageMaker mark the job Failed with the reason that
the failing rank wrote to ``/opt/ml/output/failure``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

CONFIG_DIR = "/opt/ml/input/config"
MASTER_PORT = "29500"
DONE_MARKER = "/tmp/dltrain-mpi-done"


def _read_json(path, default):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def _config_dir():
    return os.environ.get("SM_INPUT_CONFIG_DIR") or CONFIG_DIR


def cluster(config_dir=None):
    """(hosts, this host) from SageMaker's resource config (or ``SM_HOSTS``/``SM_CURRENT_HOST``)."""
    resource = _read_json(os.path.join(config_dir or _config_dir(), "resourceconfig.json"), {})
    hosts = resource.get("hosts") or json.loads(os.environ.get("SM_HOSTS", '["algo-1"]'))
    current = resource.get("current_host") or os.environ.get("SM_CURRENT_HOST", hosts[0])
    return sorted(hosts), current


def script_args(config_dir=None):
    """``--spec <uri> --code <uri>`` from the job's hyper-parameters."""
    hps = _read_json(os.path.join(config_dir or _config_dir(), "hyperparameters.json"), None)
    if hps is None:
        hps = json.loads(os.environ.get("SM_HPS", "{}"))
    args = []
    for key in ("spec", "code"):
        if key in hps:
            args += [f"--{key}", str(hps[key]).strip('"')]
    return args


def torchrun_command(hosts, current, per_host, entry, args, python=sys.executable):
    command = [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={len(hosts)}",
        f"--nproc_per_node={per_host}",
    ]
    if len(hosts) > 1:
        command += [
            f"--master_addr={hosts[0]}",
            f"--master_port={MASTER_PORT}",
            f"--node_rank={hosts.index(current)}",
        ]
    return [*command, entry, *args]


def mpi_command(hosts, per_host, entry, args, options=(), python=sys.executable):
    """mpirun on the first host: ``H x P`` ranks, the job's environment exported to all of them.

    One host runs its ranks as ``localhost``: mpirun then forks them itself, without SSH.
    """
    exported = [name for name in os.environ if name.startswith(("DLTRAIN_", "MLFLOW_", "AWS_", "SM_"))]
    slots = [f"{host}:{per_host}" for host in hosts] if len(hosts) > 1 else [f"localhost:{per_host}"]
    command = [
        "mpirun",
        "--allow-run-as-root",
        "--host",
        ",".join(slots),
        "-np",
        str(len(hosts) * per_host),
        "--bind-to",
        "none",
        "-mca",
        "btl_tcp_if_exclude",
        "lo,docker0",
    ]
    for name in sorted(exported):
        command += ["-x", name]
    return [*command, *options, python, entry, *args]


def _mpi_worker():
    subprocess.check_call(["/usr/sbin/sshd"])
    while not os.path.exists(DONE_MARKER):
        time.sleep(5)
    return 0


def _mpi_master(hosts, command):
    code = subprocess.call(command)
    for host in hosts[1:]:
        subprocess.call(["ssh", "-o", "StrictHostKeyChecking=no", host, "touch", DONE_MARKER])
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sagemaker_launch", description=__doc__)
    parser.add_argument("--distribution", choices=("torchrun", "mpi"), default="torchrun")
    parser.add_argument("--processes-per-host", type=int, default=1)
    parser.add_argument("--entry", required=True, help="path of job_script.py in the container")
    parser.add_argument("--mpi-option", action="append", default=[])
    args = parser.parse_args(argv)
    hosts, current = cluster()
    job_args = script_args()
    print(f"dltrain launch: {args.distribution} on {hosts} (this is {current})", flush=True)
    if args.distribution == "torchrun":
        return subprocess.call(
            torchrun_command(hosts, current, args.processes_per_host, args.entry, job_args)
        )
    if current != hosts[0]:
        return _mpi_worker()
    return _mpi_master(
        hosts, mpi_command(hosts, args.processes_per_host, args.entry, job_args, args.mpi_option)
    )


if __name__ == "__main__":
    sys.exit(main())
