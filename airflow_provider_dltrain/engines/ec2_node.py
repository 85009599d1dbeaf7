"""What every node of an EC2 cluster runs: its node plan -> torchrun / horovodrun / python -> markers.

``python3 ec2_node.py plan.json``. The file is copied verbatim into each instance's user data (next
to the plan), so it imports nothing but the standard library and boto3 (present wherever the job's
Python is) and never this package: the entry script it starts fetches the code bundle itself.

The plan (JSON, written by :mod:`airflow_provider_dltrain.engines.ec2_plan`) says which node this
is, how many there are, the master's address, the launcher, the entry script and its arguments, and
where the markers go. Outcomes are written to S3, never only to a log on a machine that is about to
terminate itself:

* rank 0 writes ``status.json`` ``{"state": "SUCCEEDED"|"FAILED", "error": ..., "exit_code": ...}``
  once the launcher has exited (the job's own result is at the result URI the entry writes);
* every node writes ``nodes/<rank>.json`` with its own exit, so a worker that finished and shut down
  is not mistaken for a worker that died, and a worker that failed is reported before rank 0 notices;
* every node uploads its launcher log to ``logs/node-<rank>.log``.
"""

import json
import os
import re
import subprocess
import sys
import time

ERROR_LINES = 8
ERROR_CHARS = 2000
# The last line of a Python traceback: "ValueError: ...", "torch.OutOfMemoryError: ...".
EXCEPTION_LINE = re.compile(r"^\s*(\[\S+\]:)?\s*[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b[^:]*: ")


def _s3():
    import boto3

    return boto3.client("s3")


def _split(uri):
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def put(uri, data):
    bucket, key = _split(uri)
    _s3().put_object(Bucket=bucket, Key=key, Body=data)


def get(uri):
    """The object's bytes, or None when it does not exist (yet)."""
    bucket, key = _split(uri)
    client = _s3()
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return None


def wait_for(uri, timeout_s, poll_s=2.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = get(uri)
        if data is not None:
            return data
        time.sleep(poll_s)
    raise TimeoutError(f"{uri} did not appear within {timeout_s:.0f}s")


def job_env(plan):
    """The entry's environment: the plan's plain variables plus secrets read on the node.

    ``secret_env`` maps a variable to a Secrets Manager secret id: the value is fetched here, with
    the instance's role, so it never appears in the user data, the plan or the control plane's logs.
    """
    env = dict(os.environ)
    if plan.get("controller") == "mpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        # user data runs as root, and Open MPI's mpirun refuses root unless both are set
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update({k: str(v) for k, v in (plan.get("env") or {}).items()})
    secrets = plan.get("secret_env") or {}
    if secrets:
        import boto3

        client = boto3.client("secretsmanager")
        for name, secret_id in secrets.items():
            env[name] = client.get_secret_value(SecretId=secret_id)["SecretString"]
    return env


def torchrun_argv(plan, script):
    """``torchrun`` with a static rendezvous: every node knows the master's address and port."""
    return [
        plan["python"],
        "-m",
        "torch.distributed.run",
        f"--nnodes={plan['num_nodes']}",
        f"--node-rank={plan['node_rank']}",
        f"--nproc-per-node={plan['procs_per_node']}",
        f"--master-addr={plan['master_addr'] or '127.0.0.1'}",
        f"--master-port={plan['master_port']}",
        script,
        *plan["entry"]["args"],
    ]


def horovodrun_argv(plan, script, hosts):
    """``horovodrun --gloo`` (or ``--mpi``: mpirun) over every node, from rank 0 through the run's SSH key."""
    per_node = plan["procs_per_node"]
    return [
        "horovodrun",
        "--mpi" if plan.get("controller") == "mpi" else "--gloo",
        "-np",
        str(per_node * len(hosts)),
        "-H",
        ",".join(f"{host}:{per_node}" for host in hosts),
        "-p",
        str(plan["ssh_port"]),
        "--ssh-identity-file",
        plan["ssh_key_path"],
        "--network-interface",
        plan.get("network_interface") or "eth0",
        plan["python"],
        script,
        *plan["entry"]["args"],
    ]


def fetch_entry(plan, workdir):
    script = os.path.join(workdir, os.path.basename(plan["entry"]["script_uri"]) or "entry.py")
    data = get(plan["entry"]["script_uri"])
    if data is None:
        raise FileNotFoundError(f"entry script {plan['entry']['script_uri']} does not exist")
    with open(script, "wb") as fh:
        fh.write(data)
    return script


def launcher_argv(plan, script):
    if plan["launcher"] == "python":  # a stage run: one process, Spark local[*] on this instance
        return [plan["python"], script, *plan["entry"]["args"]]
    if plan["launcher"] == "torchrun":
        return torchrun_argv(plan, script)
    hosts = json.loads(wait_for(plan["hosts_uri"], plan["wait_s"]))["hosts"]
    key = get(plan["ssh_key_uri"])
    if key is None:
        raise FileNotFoundError(f"the run's SSH key {plan['ssh_key_uri']} does not exist")
    with open(os.open(plan["ssh_key_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
        fh.write(key)
    return horovodrun_argv(plan, script, hosts)


def run_launcher(argv, env, log_path):
    """Run the launcher with its output both on the console (cloud-init's log) and in ``log_path``."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            log.write(line)
        return proc.wait()


def error_tail(log_path, exit_code):
    """The exception a rank raised (torchrun prints its own summary after it), then the log's tail."""
    try:
        with open(log_path, errors="replace") as fh:
            lines = [ln.rstrip() for ln in fh if ln.strip()]
    except OSError:
        lines = []
    raised = [ln.strip() for ln in lines if EXCEPTION_LINE.match(ln)]
    tail = "\n".join(lines[-ERROR_LINES:])
    head = f"{raised[-1]}\n" if raised else ""
    return f"{head}{tail}\n(exit code {exit_code})"[:ERROR_CHARS]


def wait_for_rank0(plan):
    """A Horovod worker only serves SSH: it stays up until rank 0 wrote the run's status."""
    wait_for(plan["status_uri"], plan["wait_s"], poll_s=5.0)
    return 0


def run_node(plan, workdir):
    log_path = os.path.join(workdir, "node.log")
    rank = plan["node_rank"]
    exit_code, error = 1, ""
    try:
        if plan["launcher"] == "horovodrun" and rank != 0:
            # rank 0's horovodrun starts this node's ranks over SSH with the same command line, so
            # the entry script must be here too, at the same path
            fetch_entry(plan, workdir)
            exit_code = wait_for_rank0(plan)
        else:
            argv = launcher_argv(plan, fetch_entry(plan, workdir))
            exit_code = run_launcher(argv, job_env(plan), log_path)
        if exit_code != 0:
            error = error_tail(log_path, exit_code)
    except Exception as err:  # reported through the markers: the node is about to shut down
        exit_code, error = 1, f"node {rank}: {type(err).__name__}: {err}"
        print(error, file=sys.stderr, flush=True)
    state = "SUCCEEDED" if exit_code == 0 else "FAILED"
    marker = {"state": state, "node_rank": rank, "exit_code": exit_code, "error": error}
    write_markers(plan, log_path, marker)
    return exit_code


def write_markers(plan, log_path, marker):
    rank = marker["node_rank"]
    if os.path.exists(log_path):
        with open(log_path, "rb") as fh:
            put(f"{plan['run_uri']}/logs/node-{rank}.log", fh.read())
    put(f"{plan['run_uri']}/nodes/{rank}.json", json.dumps(marker).encode())
    if rank == 0:
        put(plan["status_uri"], json.dumps(marker).encode())


def setup_failed(plan, workdir, log_path):
    """The user data's setup commands failed: say so on S3 instead of waiting for the dead-man switch."""
    error = "setup commands failed:\n" + error_tail(log_path, 1)
    marker = {"state": "FAILED", "node_rank": plan["node_rank"], "exit_code": 1, "error": error}
    write_markers(plan, log_path, marker)
    return 1


def main(argv):
    with open(argv[0]) as fh:
        plan = json.load(fh)
    plan["python"] = plan.get("python") or sys.executable
    workdir = os.path.dirname(os.path.abspath(argv[0]))
    if len(argv) == 3 and argv[1] == "--setup-failed":
        return setup_failed(plan, workdir, argv[2])
    return run_node(plan, workdir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
