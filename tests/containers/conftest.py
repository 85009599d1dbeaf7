"""The container tier: cloud jobs in the images ``docker/images.py`` builds, as the services run them.

``images`` builds (or finds, by content hash) the training, Glue-like and EMR-like images once per
machine; ``fake_aws_containers`` is a fake AWS in container mode: every Glue run, EMR Serverless run,
SageMaker job and EC2 instance it starts is a container of those images, with nothing from this
test's Python. The pytest base directory is shared into every container (MLflow's SQLite store).
After each test, nothing of it may be left: no cloud resource, no container; after the session, no
network either.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.images import ensure_images

REPO = Path(__file__).resolve().parents[2]
# the engine tests' job modules (transforms, training functions, the EC2 stand-in entry)
sys.path.insert(0, str(REPO / "tests" / "engines"))
IMAGES = ("train", "glue", "emr")
VENV_PACK = "venv-pack==0.2.0"
# what an ETL job imports on EMR Serverless, from its venv-pack archive (pyspark comes from the image)
ARCHIVE_PACKAGES = ("boto3", "pyarrow", "pandas", "numpy", "tenacity")


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    return ensure_images(list(IMAGES))


@pytest.fixture(scope="session")
def venv_archives(images, tmp_path_factory) -> dict[str, Path]:
    """Two venv-pack archives built in the EMR-like image: ``full`` (the ETL job's packages and
    deltalake) and ``no_deltalake`` (the same but deltalake). Cached per machine by their recipe."""
    constraints = (REPO / "constraints" / "constraints-3.11.txt").read_bytes()
    recipe = hashlib.sha256(
        images["emr"].encode() + constraints + repr(ARCHIVE_PACKAGES).encode()
    ).hexdigest()[:16]
    cache = Path(os.environ.get("DLTRAIN_HOME", ".dltrain")).resolve() / "images" / f"venv-archives-{recipe}"
    archives = {"full": cache / "full.tar.gz", "no_deltalake": cache / "no-deltalake.tar.gz"}
    if not all(path.exists() for path in archives.values()):
        work = tmp_path_factory.mktemp("venv-archives")
        shutil.copy(REPO / "constraints" / "constraints-3.11.txt", work / "constraints.txt")
        script = (
            "set -e; python -m venv /tmp/env; "
            f"/tmp/env/bin/pip install -q -c /out/constraints.txt {VENV_PACK} {' '.join(ARCHIVE_PACKAGES)}; "
            "/tmp/env/bin/venv-pack -q -p /tmp/env -o /out/no-deltalake.tar.gz; "
            "/tmp/env/bin/pip install -q -c /out/constraints.txt deltalake; "
            "/tmp/env/bin/venv-pack -q -p /tmp/env -o /out/full.tar.gz"
        )
        subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "host",
                "-v",
                f"{work}:/out",
                "--entrypoint",
                "bash",
                images["emr"],
                "-c",
                script,
            ],
            check=True,
            capture_output=True,
        )
        cache.mkdir(parents=True, exist_ok=True)
        for path in archives.values():
            shutil.move(str(work / path.name), path)
    return archives


@pytest.fixture(scope="session")
def fake_aws_containers(images, tmp_path_factory):
    from airflow_provider_dltrain.testing.fake_aws_process import start_fake_aws

    shares = [tmp_path_factory.getbasetemp()]
    with start_fake_aws(tmp_path_factory.mktemp("fake-aws-containers"), images=images, shares=shares) as fake:
        yield fake


@pytest.fixture
def containers_aws(fake_aws_containers):
    """The endpoint of the container-mode fake; after the test, fails on any resource or container left."""
    yield fake_aws_containers
    leaked = fake_aws_containers.leaks()
    assert not leaked, "left after the test:\n  " + "\n  ".join(leaked)
