"""The script every cloud job runs (Glue job, EMR step, EMR Serverless run, ``spark-submit``).

It is uploaded as it is, so it imports nothing but the standard library (and boto3, present on Glue,
EMR and EMR Serverless) until the code bundle named by ``--code`` is on ``sys.path``; then it hands
over to :func:`airflow_provider_dltrain.jobs.entry.main`.
"""

import atexit
import os
import shutil
import sys
import tempfile


def _fetch(uri, directory):
    target = os.path.join(directory, os.path.basename(uri.rstrip("/")) or "code.zip")
    if uri.startswith(("s3://", "s3a://")):
        try:
            import boto3
        except ImportError as err:  # the first import the job makes: say where its packages come from
            raise ImportError(
                f"{err}: this job's Python cannot fetch {uri}. Its packages (boto3, deltalake, pyarrow) "
                "must come with the job: on EMR or EMR Serverless set the engine option venv_archive_uri "
                "(a venv-pack archive holding them) or run an image that has them; on Glue name them in "
                "additional_python_modules"
            ) from err

        bucket, _, key = uri.split("://", 1)[1].partition("/")
        boto3.client("s3").download_file(bucket, key, target)
    else:
        shutil.copy(uri[len("file://") :] if uri.startswith("file://") else uri, target)
    return target


def _code_uris(argv):
    uris = []
    for i, arg in enumerate(argv):
        if arg == "--code" and i + 1 < len(argv):
            uris.append(argv[i + 1])
        elif arg.startswith("--code="):
            uris.append(arg.split("=", 1)[1])
    return uris


def run(argv):
    directory = tempfile.mkdtemp(prefix="dltrain-code-")
    # spark_submit runs this on the Airflow worker, run after run: leave no copy of the bundle behind.
    # Registered before anything is imported from it, so it runs after every exit hook registered
    # later (last in, first out).
    atexit.register(shutil.rmtree, directory, True)
    paths = [_fetch(uri, directory) for uri in _code_uris(argv)]
    sys.path[:0] = paths  # the bundle wins over any installed copy: the job runs the staged code
    from airflow_provider_dltrain.jobs.entry import main

    return main(argv, code_paths=paths)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
