"""docker/ without a Docker engine: hadolint, COPY sources, the ignore file and the compose file."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker" / "stack"  # the deployment; docker/jobs holds the job images
JOBS = REPO / "docker" / "jobs"
DOCKERFILES = sorted([*DOCKER.glob("Dockerfile*"), *JOBS.glob("Dockerfile*")])
HEAVY = [".venv", ".venv-spark35", ".dltrain", ".git", "__pycache__", "airflow_provider_dltrain/__pycache__"]
HADOLINT = Path(sys.executable).with_name("hadolint")


def copy_sources(dockerfile: Path) -> list[str]:
    """The context paths every COPY/ADD of ``dockerfile`` reads (``--from`` stages excluded)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources.extend(args[:-1])
    return sources


def _matches(prefix: str, pattern: str) -> bool:
    # fnmatch's ``*`` also crosses ``/``: a pattern without ``**/`` must match at its own depth
    if pattern.startswith("**/"):
        rest = pattern[3:]
        return fnmatch.fnmatchcase(prefix, rest) or fnmatch.fnmatchcase(prefix, f"*/{rest}")
    return fnmatch.fnmatchcase(prefix, pattern) and prefix.count("/") == pattern.count("/")


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether the ignore file keeps ``path`` (or a directory above it) out of the build context."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for raw in patterns:
        negate, pattern = raw.startswith("!"), raw.lstrip("!").rstrip("/")
        if any(_matches(prefix, pattern) for prefix in prefixes):
            result = not negate
    return result


def ignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_dockerfile_passes_hadolint(dockerfile):
    lint = subprocess.run([str(HADOLINT), str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copy_source_exists_and_is_not_ignored(dockerfile):
    sources = copy_sources(dockerfile)
    assert sources, f"{dockerfile.name} copies nothing from the context"
    patterns = ignore_patterns()
    for source in sources:
        assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source} does not exist"
        assert not ignored(source, patterns), f"{dockerfile.name}: COPY {source} is excluded by .dockerignore"


def test_dockerignore_keeps_environments_state_and_history_out():
    patterns = ignore_patterns()
    assert all(ignored(path, patterns) for path in HEAVY), [p for p in HEAVY if not ignored(p, patterns)]
    assert ignored("docker/stack/.env", patterns)  # the deployment's secrets
    assert not ignored("airflow_provider_dltrain/training/rank_job.py", patterns)


def test_no_dockerfile_hardcodes_an_architecture():
    for dockerfile in DOCKERFILES:
        code = "\n".join(line for line in dockerfile.read_text().splitlines() if not line.startswith("#"))
        assert not re.search(r"amd64|x86_64|aarch64|arm64", code), dockerfile.name


def test_the_checks_catch_a_missing_copy_source_and_a_leaky_ignore_file(tmp_path):
    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM python:3.11\nCOPY --chown=1:1 nowhere/ a.txt /opt/\n")
    assert copy_sources(broken) == ["nowhere/", "a.txt"]
    assert not (REPO / "nowhere").exists()
    assert not ignored(".venv/bin/python", [".dltrain", "**/__pycache__"])
    assert ignored("a/b/__pycache__/x.pyc", ["**/__pycache__"])
    assert not ignored("a/.git", [".git"])  # a top-level pattern only matches at the top


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _listening_ports(service: dict) -> set[int]:
    """Ports a service's command says it listens on (``--port=N``, ``--port N``, ``-s3.port=N``)."""
    command = service.get("command") or []
    text = " ".join(command) if isinstance(command, list) else str(command)
    return {int(p) for p in re.findall(r"-(?:s3\.)?port[= ](\d+)", text)}


def test_compose_file_parses_and_names_only_existing_builds_files_and_services():
    compose = _compose()
    services = compose["services"]
    assert {"api-server", "scheduler", "dag-processor", "triggerer", "postgres", "mlflow", "s3"} <= set(
        services
    )
    for name, service in services.items():
        build = service.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            assert context == REPO, f"{name}: build context {context} is not the repository root"
            assert (context / build["dockerfile"]).is_file(), f"{name}: no {build['dockerfile']}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).is_file(), f"{name}: mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"


def test_compose_ports_are_unique_and_match_what_each_service_listens_on():
    services = _compose()["services"]
    published = [p for s in services.values() for p in s.get("ports", [])]
    # "${DLTRAIN_S3_PORT:-8333}:8333": the host side may be a variable with its default
    host_ports = [p.rsplit(":", 1)[0] for p in published]
    assert len(host_ports) == len(set(host_ports)), host_ports
    assert len({re.sub(r"\$\{\w+:-(\d+)\}", r"\1", p) for p in host_ports}) == len(host_ports), host_ports
    for name, service in services.items():
        for mapping in service.get("ports", []):
            container = int(mapping.rsplit(":", 1)[1])
            assert container in _listening_ports(service), (
                f"{name} publishes {container} but listens elsewhere"
            )
    # every http://service:port URL in the file points at a service listening on that port
    text = (DOCKER / "compose.yaml").read_text()
    urls = set(re.findall(r"https?://([a-z0-9-]+):(\d+)", text))
    assert urls, "no service URLs found"
    for host, port in urls:
        if host == "localhost":
            continue
        assert host in services and int(port) in _listening_ports(services[host]), (host, port)


# what docker/stack/.env must set (docker/stack/env.example), each value distinct so a leak can be traced to it
SECRETS = {
    "POSTGRES_PASSWORD": "pg-superuser-pw",
    "AIRFLOW_DB_PASSWORD": "airflow-db-pw",
    "MLFLOW_DB_PASSWORD": "mlflow-db-pw",
    "AIRFLOW_JWT_SECRET": "jwt-secret",
    "DLTRAIN_S3_ACCESS_KEY": "s3-access-key",
    "DLTRAIN_S3_SECRET_KEY": "s3-secret-key",
    "AIRFLOW_ADMIN_PASSWORD": "airflow-admin-pw",
    "MLFLOW_ADMIN_PASSWORD": "mlflow-admin-pw",
    "MLFLOW_SECRET_KEY": "mlflow-flask-key",
}
IMAGES = {"DLTRAIN_AIRFLOW_IMAGE": "dltrain/airflow:x", "DLTRAIN_POSTGRES_IMAGE": "dltrain/postgres:y"}
LONG_RUNNING = {"postgres", "s3", "mlflow", "api-server", "scheduler", "dag-processor", "triggerer"}


def _config(*files: str, **extra: str) -> dict:
    """``docker-compose config`` of ``files`` (names under docker/) with the secrets of docker/stack/.env."""
    args = [a for f in files for a in ("-f", str(DOCKER / f))]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLTRAIN_", "MLFLOW_"))}
    merged = subprocess.run(
        ["docker-compose", *args, "config"],
        capture_output=True,
        text=True,
        env={**env, **SECRETS, **IMAGES, **extra},
        timeout=60,
    )
    assert merged.returncode == 0, merged.stderr
    return yaml.safe_load(merged.stdout)["services"]


def _published(services: dict) -> dict[str, list[str]]:
    """service -> its published ports as ``host_ip:published:target`` (either syntax of the output)."""
    found: dict[str, list[str]] = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            if isinstance(port, dict):
                port = f"{port.get('host_ip', '')}:{port['published']}:{port['target']}"
            found.setdefault(name, []).append(str(port).removesuffix("/tcp"))
    return found


@pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.offline.yaml")])
def test_published_ports_bind_to_loopback_unless_docker_env_names_an_address(files):
    published = _published(_config(*files))
    assert published == {"api-server": ["127.0.0.1:8080:8080"], "mlflow": ["127.0.0.1:5000:5000"]}
    wide = _published(_config(*files, DLTRAIN_BIND_ADDRESS="0.0.0.0"))
    assert wide == {"api-server": ["0.0.0.0:8080:8080"], "mlflow": ["0.0.0.0:5000:5000"]}


def test_the_s3_store_is_published_only_by_the_opt_in_file_and_on_loopback():
    for files in (("compose.yaml",), ("compose.yaml", "compose.offline.yaml")):
        published = _published(_config(*files, "compose.publish-s3.yaml", DLTRAIN_S3_PORT="9333"))
        assert published["s3"] == ["127.0.0.1:9333:8333"], files


def test_every_long_running_service_has_an_init_and_its_own_database_role():
    services = _config("compose.yaml", "compose.offline.yaml")
    assert {name for name, s in services.items() if s.get("init") is True} >= LONG_RUNNING
    airflow_db = services["scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert airflow_db.startswith("postgresql+psycopg2://airflow:airflow-db-pw@postgres:5432/airflow")
    assert services["mlflow"]["environment"]["MLFLOW_BACKEND_STORE_URI"].startswith(
        "postgresql+psycopg2://mlflow:mlflow-db-pw@"
    )
    superuser = SECRETS["POSTGRES_PASSWORD"]
    holders = [n for n, s in services.items() if superuser in yaml.safe_dump(s.get("environment", {}))]
    assert holders == ["postgres"], holders
    init_sql = (DOCKER / "postgres-init.sql").read_text()
    assert "CREATE ROLE airflow LOGIN" in init_sql and "CREATE ROLE mlflow LOGIN" in init_sql
    statements = [line for line in init_sql.splitlines() if not line.startswith("--")]
    assert not [line for line in statements if "SUPERUSER" in line.upper()]


def test_no_secret_is_on_a_command_line_and_mlflow_authenticates():
    services = _config("compose.yaml", "compose.offline.yaml")
    for name, service in services.items():
        argv = yaml.safe_dump([service.get("entrypoint"), service.get("command"), service.get("healthcheck")])
        leaked = [k for k, v in SECRETS.items() if v in argv]
        assert not leaked, f"{name}: {leaked} on its command line (docker top shows it)"
    mlflow = services["mlflow"]
    assert "--app-name basic-auth" in " ".join(mlflow["command"])
    assert mlflow["environment"]["MLFLOW_AUTH_ADMIN_PASSWORD"] == SECRETS["MLFLOW_ADMIN_PASSWORD"]
    conn = json.loads(services["scheduler"]["environment"]["AIRFLOW_CONN_MLFLOW_DEFAULT"])
    assert (conn["conn_type"], conn["login"], conn["password"]) == ("mlflow", "admin", "mlflow-admin-pw")
    example = (DOCKER / "env.example").read_text().splitlines()
    assert set(SECRETS) <= {line.split("=")[0] for line in example if line and not line.startswith("#")}


def test_the_offline_file_swaps_only_the_images_and_the_s3_store():
    """docker-compose itself merges compose.yaml and compose.offline.yaml (no engine needed)."""
    env = {**os.environ, **SECRETS, **IMAGES}
    files = ["-f", str(DOCKER / "compose.yaml"), "-f", str(DOCKER / "compose.offline.yaml")]
    merged = subprocess.run(
        ["docker-compose", *files, "config"], capture_output=True, text=True, env=env, timeout=60
    )
    assert merged.returncode == 0, merged.stderr
    services = yaml.safe_load(merged.stdout)["services"]
    assert set(services) == set(_compose()["services"])
    assert services["postgres"]["image"] == "dltrain/postgres:y"
    assert services["s3"]["image"] == services["scheduler"]["image"] == "dltrain/airflow:x"
    assert services["s3"]["entrypoint"] == ["dltrain", "fake-aws"] and "8333" in services["s3"]["command"]
    assert int(services["scheduler"]["environment"]["AIRFLOW__CORE__PARALLELISM"]) >= 4
    missing = subprocess.run(
        ["docker-compose", *files, "config"],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "DLTRAIN_POSTGRES_IMAGE"},
        timeout=60,
    )
    assert missing.returncode != 0 and "docker/images.py build postgres" in missing.stderr


def test_shell_scripts_of_docker_parse():
    scripts = [JOBS / s for s in ("build_horovod.sh", "train", "glue-run", "emr-run")]
    for script in [*scripts, DOCKER / "postgres-entry"]:
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
