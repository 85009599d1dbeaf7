"""What every node of a dltrain TrainJob runs: fetch the job script, hand it the staged spec.

The Kubeflow SDK ships :func:`dltrain_train_job` as source (``CustomTrainer(func=...)``): its text and
a call with the staged URIs become the script torchrun starts on each node of the TrainJob, so it
imports nothing at module level, only the standard library inside (and boto3 for an ``s3://``
staging area, present in the training image). The job script then fetches the code bundle and runs
the same rank code as every remote backend (``jobs/train_entry.py``: the pinned version, training,
rank 0's report); torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` say which rank this is. On
Kubeflow's Docker backend a secret file mounted into the node (``secret_env_file``) is read first.
"""


def dltrain_train_job(script_uri: str, spec_uri: str, code_uri: str, secret_env_file: str = "") -> None:
    """Run one rank of a dltrain training job (the process torchrun started on this node).

    ``secret_env_file``: a mounted file of ``NAME=value`` lines (``export`` and shell quoting allowed),
    set in this process's environment first: the store's keys reach boto3 and delta-rs this way.
    """
    import importlib.util
    import os
    import shlex
    import shutil
    import sys
    import tempfile

    if secret_env_file:
        with open(secret_env_file) as handle:
            for line in handle:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, sep, value = line.removeprefix("export ").partition("=")
                if sep and name.strip():
                    os.environ[name.strip()] = " ".join(shlex.split(value))

    directory = tempfile.mkdtemp(prefix="dltrain-trainjob-")
    script = os.path.join(directory, "job_script.py")
    if script_uri.startswith(("s3://", "s3a://")):
        import boto3

        bucket, _, key = script_uri.split("://", 1)[1].partition("/")
        boto3.client("s3").download_file(bucket, key, script)
    else:
        shutil.copy(script_uri[len("file://") :] if script_uri.startswith("file://") else script_uri, script)
    loaded = importlib.util.spec_from_file_location("dltrain_job_script", script)
    assert loaded is not None and loaded.loader is not None, script
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    # the exit status is the rank's outcome: torchrun, the node and the TrainJob fail with it
    sys.exit(module.run(["--spec", spec_uri, "--code", code_uri]))
