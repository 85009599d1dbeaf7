"""Build the project's images from a local Debian base, tagged by the content hash of their inputs.

    python docker/images.py [build] [NAME ...]     build (or find) NAME... (default: every image);
                                                  prints {"name": "dltrain/name:hash", ...} as JSON
    python docker/images.py tags [NAME ...]       the tags the current inputs give, building nothing
    python docker/images.py prune                 remove the images this script built whose tag is no
                                                  longer current (never an image built FROM one of them)

Images (``docker/stack/Dockerfile*``: the deployment; ``docker/jobs/Dockerfile*``: what runs inside a job;
each takes its parent as ``BASE_IMAGE``; the tree: ``docker/README.md``):

- ``base``: Debian bookworm (debootstrap, minbase) with the CPython running this script as
  ``/usr/local/bin/python`` (what ``python:3.11-slim`` provides: a CPython of its own, not Debian's
  3.11.2, which some pinned packages refuse) and the host's CA bundle, so that pip and apt work behind
  a TLS-intercepting proxy. Built locally: no registry is needed.
- ``train``: ``docker/jobs/Dockerfile.train`` (SageMaker jobs, EC2 cluster nodes).
- ``glue`` / ``emr``: the two targets of ``docker/jobs/Dockerfile.jobs``.
- ``airflow``: ``docker/stack/Dockerfile.airflow``, Airflow and this provider with the constraints file (the compose stack).
- ``postgres``: ``docker/stack/Dockerfile.postgres``, Debian's PostgreSQL behind the official image's contract.

A tag is ``dltrain/<name>:<16 hex>``, the SHA-256 of the image's recipe: its Dockerfile and target, build
arguments, every file it copies, and its parent's tag. An image whose tag exists is not rebuilt, so a
second ``make images`` on one machine takes seconds; a changed input builds a new tag, and ``prune``
removes the stale ones. Every image this script builds carries the label ``dltrain.tag`` holding its own
tag; an image built ``FROM`` one of ours inherits that label with *our* tag in it, not its own name, so
``prune`` tells them apart and removes only a stale tag whose image says it is that tag (a user's
``dltrain/train-kubeflow:local`` stays, whatever its name). Standard library only: runs before any
virtual environment exists.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
WHEELS = DOCKER / "wheels"
REPOSITORY = "dltrain"
# the one constraints file the images install with (the other cells' files under constraints/ are not copied)
CONSTRAINTS = "constraints/constraints-3.11.txt"
LABEL = "dltrain.image"
OWN_TAG = "dltrain.tag"  # the tag the image was built as: the proof that prune may remove it
SUITE = "bookworm"
MIRROR = os.environ.get("DLTRAIN_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CA_BUNDLE = Path(os.environ.get("DLTRAIN_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
# ca-certificates, and the libraries CPython's extension modules link (ssl, ctypes, sqlite3, bz2, lzma,
# readline, uuid, zlib)
BASE_PACKAGES = (
    "ca-certificates,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libuuid1,zlib1g"
)
# The CPython of the base: the build this script runs on (what the constraints file was made with).
# Debian bookworm's own python3 is 3.11.2, older than some pinned packages accept (soupsieve 4.1.3
# needs 3.11.5), so the interpreter is copied in, as python:3.11-slim carries a CPython of its own.
BASE_PYTHON = Path(os.environ.get("DLTRAIN_BASE_PYTHON", sys.base_prefix))
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
TORCH_VERSION = os.environ.get("TORCH_VERSION", "2.13.0")
HOROVOD_VERSION = os.environ.get("HOROVOD_VERSION", "0.28.1")
HOROVOD_CACHE = Path(
    os.environ.get(
        "DLTRAIN_WHEEL_CACHE",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dltrain/wheels",
    )
)


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str | None  # None: the debootstrap base
    parent: str | None = None
    target: str | None = None
    inputs: tuple[str, ...] = ()  # context paths the Dockerfile copies (files or directories)
    build_args: dict[str, str] = field(default_factory=dict)


IMAGES = {
    image.name: image
    for image in (
        Image("base", None),
        Image(
            "train",
            "docker/jobs/Dockerfile.train",
            parent="base",
            inputs=("docker/wheels", CONSTRAINTS, "docker/jobs/build_horovod.sh", "docker/jobs/train"),
            build_args={"TORCH_VERSION": TORCH_VERSION, "HOROVOD_VERSION": HOROVOD_VERSION},
        ),
        Image(
            "glue",
            "docker/jobs/Dockerfile.jobs",
            parent="base",
            target="glue",
            inputs=(CONSTRAINTS, "docker/jobs/glue-run"),
        ),
        Image(
            "emr", "docker/jobs/Dockerfile.jobs", parent="base", target="emr", inputs=("docker/jobs/emr-run",)
        ),
        Image(
            "postgres",
            "docker/stack/Dockerfile.postgres",
            parent="base",
            inputs=("docker/stack/postgres-entry",),
        ),
        Image(
            "airflow",
            "docker/stack/Dockerfile.airflow",
            parent="base",
            inputs=(
                "docker/wheels",
                CONSTRAINTS,
                "pyproject.toml",
                "airflow_provider_dltrain",
                "dags",
            ),
            build_args={"TORCH_VERSION": TORCH_VERSION},
        ),
    )
}


def log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def docker(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, text=True, capture_output=capture)


def exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def _files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for child in sorted(path.rglob("*")):
        if child.is_file() and "__pycache__" not in child.parts and child.suffix != ".pyc":
            yield child


def stage_wheels() -> None:
    """Put this machine's torch wheel and Horovod wheel cache into ``docker/wheels`` (git-ignored).

    The training image then installs torch from the wheel pip finds on this machine instead of the
    download site, and Horovod from the wheel ``make horovod`` built (same Debian, Open MPI, torch and
    Python) instead of compiling it for ten minutes. Without them the image downloads and compiles.
    """
    WHEELS.mkdir(exist_ok=True)
    links = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True
    ).stdout.split()
    for folder in map(Path, links):
        for wheel in folder.glob(f"torch-{TORCH_VERSION}+cpu-cp311-*.whl"):
            if not (WHEELS / wheel.name).exists():
                shutil.copy2(wheel, WHEELS / wheel.name)
    cache = HOROVOD_CACHE / f"horovod-{HOROVOD_VERSION}-torch-{TORCH_VERSION}+cpu-cp311-mpi"
    if any(cache.glob("horovod-*.whl")) and not (WHEELS / cache.name).exists():
        shutil.copytree(cache, WHEELS / cache.name)


def tag(name: str, _memo: dict[str, str] = {}) -> str:  # noqa: B006 - a per-process memo on purpose
    if name in _memo:
        return _memo[name]
    image = IMAGES[name]
    digest = hashlib.sha256()
    if image.dockerfile is None:
        # the recipe's syntax tree, not its text: reformatting the code does not rebuild the base
        recipe = "".join(ast.dump(ast.parse(inspect.getsource(f))) for f in (build_base, install_python))
        for part in (SUITE, MIRROR, BASE_PACKAGES, recipe, str(BASE_PYTHON), sys.version):
            digest.update(part.encode())
        digest.update(CA_BUNDLE.read_bytes() if CA_BUNDLE.exists() else b"")
    else:
        digest.update(f"{image.dockerfile}\0{image.target}\0{sorted(image.build_args.items())}".encode())
        digest.update(tag(image.parent or "base").encode())
        for path in [image.dockerfile, *image.inputs]:
            for file in _files(REPO / path):
                digest.update(file.relative_to(REPO).as_posix().encode() + b"\0")
                digest.update(file.read_bytes())
                digest.update(b"x" if os.access(file, os.X_OK) else b"-")
    _memo[name] = f"{REPOSITORY}/{name}:{digest.hexdigest()[:16]}"
    return _memo[name]


def build_base(target: str) -> None:
    """debootstrap a minimal bookworm with Python 3.11 and import it as ``target``."""
    if shutil.which("debootstrap") is None:
        raise SystemExit("images: the base image needs debootstrap (apt-get install -y debootstrap)")
    with tempfile.TemporaryDirectory(prefix="dltrain-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", SUITE, str(root), MIRROR],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        if CA_BUNDLE.exists():  # the proxy's CA, if any, is in the host's bundle (see the docstring)
            shutil.copy(CA_BUNDLE, root / "etc/ssl/certs/ca-certificates.crt")
        install_python(root / "usr/local")
        subprocess.run(["chroot", str(root), "apt-get", "clean"], check=True)
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)
        cert = "/etc/ssl/certs/ca-certificates.crt"
        changes = [
            f"ENV PIP_CERT={cert}",
            f"ENV REQUESTS_CA_BUNDLE={cert}",
            f"ENV SSL_CERT_FILE={cert}",
            "ENV LANG=C.UTF-8",
            'CMD ["bash"]',
            f"LABEL {LABEL}=base",
        ]
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        args = [arg for change in changes for arg in ("--change", change)]
        subprocess.run(
            ["docker", "import", *args, "-", target], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL
        )
        if tar.stdout is not None:
            tar.stdout.close()
        if tar.wait() != 0:
            raise SystemExit("images: tar of the base rootfs failed")


def install_python(local: Path) -> None:
    """BASE_PYTHON's interpreter, standard library and headers under ``local`` (the rootfs's /usr/local),
    as python:3.11-slim lays them out, with pip from ``ensurepip``; none of its installed packages."""
    if not (BASE_PYTHON / "bin" / PY).exists() or BASE_PYTHON == Path("/usr"):
        raise SystemExit(
            f"images: {BASE_PYTHON} is not a CPython installation of its own: run this script with one "
            "(pyenv's, or a source build), or set DLTRAIN_BASE_PYTHON to its prefix"
        )
    lib = BASE_PYTHON / "lib"
    # neither its packages, nor the test suites, nor the static libpython (44 MB: for embedding only)
    skip = shutil.ignore_patterns(
        "site-packages", "test", "tests", "idle_test", "__pycache__", "*.pyc", "*.a"
    )
    shutil.copytree(lib / PY, local / "lib" / PY, ignore=skip, symlinks=True)
    (local / "lib" / PY / "site-packages").mkdir()
    for shared in lib.glob(f"lib{PY}.so*"):
        shutil.copy2(shared, local / "lib" / shared.name, follow_symlinks=False)
    shutil.copytree(BASE_PYTHON / "include", local / "include", symlinks=True, dirs_exist_ok=True)
    (local / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BASE_PYTHON / "bin" / PY, local / "bin" / PY)
    for alias in ("python3", "python"):
        (local / "bin" / alias).symlink_to(PY)
    rootfs = local.parents[1]
    subprocess.run(["chroot", str(rootfs), "ldconfig"], check=True)
    subprocess.run(
        ["chroot", str(rootfs), f"/usr/local/bin/{PY}", "-m", "ensurepip", "--default-pip"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def build(name: str) -> str:
    """Build ``name`` (and its parents) unless its tag exists; return the tag."""
    image = IMAGES[name]
    if image.parent:
        build(image.parent)
    target = tag(name)
    if exists(target):
        return target
    started = time.monotonic()
    log(f"building {target}")
    if image.dockerfile is None:
        build_base(target)
        # the imported base gets its own-tag label in a step of no layers (the recipe stays hashed as is)
        _docker_build(["-t", target, *labels(name, target), "-"], f"FROM {target}\n")
    else:
        # --force-rm: a failed step's container goes too, not only a successful one's
        command = ["build", "--force-rm", "-f", image.dockerfile, "-t", target, *labels(name, target)]
        command += ["--build-arg", f"BASE_IMAGE={tag(image.parent or 'base')}"]
        for key, value in image.build_args.items():
            command += ["--build-arg", f"{key}={value}"]
        if image.target:
            command += ["--target", image.target]
        result = subprocess.run(["docker", *command, "."], cwd=REPO, text=True, capture_output=True)
        if result.returncode != 0:
            raise SystemExit(f"images: building {target} failed:\n{(result.stdout + result.stderr)[-6000:]}")
    log(f"built {target} in {time.monotonic() - started:.0f} s")
    return target


def labels(name: str, target: str) -> list[str]:
    """The ``docker build`` arguments that mark ``target`` (image ``name``) as built here, as itself."""
    return ["--label", f"{LABEL}={name}", "--label", f"{OWN_TAG}={target}"]


def _docker_build(args: list[str], dockerfile: str) -> None:
    result = subprocess.run(
        ["docker", "build", "-q", *args], input=dockerfile, text=True, capture_output=True
    )
    if result.returncode != 0:
        raise SystemExit(f"images: docker build {' '.join(args)} failed:\n{result.stderr[-4000:]}")


def prune() -> list[str]:
    """Remove every tag this script built that is not the current one of its name; return them.

    A tag goes only when its image's ``dltrain.tag`` label names that very tag: an image built
    ``FROM`` ours (it inherits the label, naming our tag) or tagged by a user is never touched,
    whatever its name; ``docker rmi`` of a tag removes that tag only, never another name of the image.
    """
    current = {tag(name) for name in IMAGES}
    listed = docker(
        "images", "--filter", f"label={LABEL}", "--format", "{{.Repository}}:{{.Tag}}"
    ).stdout.split()
    candidates = [t for t in listed if t.startswith(f"{REPOSITORY}/") and t not in current]
    if not candidates:
        return []
    owners = docker(
        "image", "inspect", "--format", f'{{{{index .Config.Labels "{OWN_TAG}"}}}}', *candidates
    ).stdout.splitlines()
    stale = [t for t, own in zip(candidates, owners, strict=True) if own == t]
    for old in stale:
        docker("rmi", old, check=False)
    return stale


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One build at a time per machine: pytest workers and ``make images`` may start together."""
    import fcntl

    path = Path(tempfile.gettempdir()) / "dltrain-images.lock"
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure(names: list[str]) -> dict[str, str]:
    """Build (or find) ``names``; what the tests and ``make images`` call."""
    with _lock():
        if any(n in ("train", "airflow") for n in names):
            stage_wheels()
        return {name: build(name) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="build", choices=("build", "tags", "prune"))
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {', '.join(IMAGES)}")
    args = parser.parse_args(argv)
    names = args.names or list(IMAGES)
    unknown = sorted(set(names) - set(IMAGES))
    if unknown:
        parser.error(f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGES)}")
    if args.command == "prune":
        print(json.dumps(prune()))
        return 0
    if args.command == "tags":
        stage_wheels()
        print(json.dumps({name: tag(name) for name in names}, indent=1))
        return 0
    started = time.monotonic()
    tags = ensure(names)
    log(f"{len(tags)} images ready in {time.monotonic() - started:.0f} s")
    print(json.dumps(tags, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
