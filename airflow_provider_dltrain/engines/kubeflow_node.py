"""What every node of a dltrain TrainJob runs: fetch the job script, hand it the staged spec.

The Kubeflow SDK ships :func:`dltrain_train_job` as source (``CustomTrainer(func=...)``): its text and
a call with the staged URIs become the script torchrun starts on each node of the TrainJob, so it
imports nothing at module level, only the standard library inside (and boto3 for an ``s3://``
staging area, present in the training image). The job script then fetches the code bundle and runs
the same rank code as every remote backend (``jobs/train_entry.py``: the pinned version, training,
rank 0's report); torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` say which rank this is.
"""


def dltrain_train_job(script_uri: str, spec_uri: str, code_uri: str) -> None:
    """Run one rank of a dltrain training job (the process torchrun started on this node)."""
    import importlib.util
    import os
    import shutil
    import sys
    import tempfile

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
