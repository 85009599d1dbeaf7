"""Put a run's spec, the job script and the code bundle where a job can read them; read its result.

Layout under the staging URI (an ``s3://`` prefix, or a shared directory for ``spark_submit``)::

    code/<sha256>.zip           the provider package plus the user's transform module (pure Python)
    code/job_script-<sha>.py    the script the service runs (``jobs/job_script.py``)
    runs/<task_key>/<try>/spec.json, result.json

Bundles are content-addressed: staging the same code twice uploads nothing. The bundle holds only
pure-Python code; native libraries (deltalake, pyarrow, torch) come from the job's environment
(Glue ``--additional-python-modules``, an EMR virtualenv archive, an EMR Serverless image).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import importlib.util
import io
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_provider_dltrain.engines.base import (
    JobFailedError,
    JobHandle,
    StagedRun,
    describe_ids,
    parse_result,
)
from airflow_provider_dltrain.engines.objects import (
    delete_object,
    object_exists,
    read_object,
    write_object,
)
from airflow_provider_dltrain.engines.run_spec import JobSpec
from airflow_provider_dltrain.exceptions import InvalidSpecError

_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entries carry no build time: same code, same bytes, same key


class Stager:
    """Reads and writes objects under ``staging_uri`` with an S3 client (or the local filesystem)."""

    def __init__(self, staging_uri: str, s3_client: Any = None) -> None:
        if not staging_uri:
            raise InvalidSpecError(
                "engine option staging_uri is required: an s3:// prefix the job can read and write, "
                "e.g. 's3://my-bucket/dltrain'"
            )
        self.remote = staging_uri.startswith(("s3://", "s3a://"))
        if self.remote and s3_client is None:
            raise InvalidSpecError("an s3:// staging_uri needs an S3 client")
        self.root = staging_uri.rstrip("/")
        self.s3 = s3_client

    def uri(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def put(self, uri: str, data: bytes) -> None:
        write_object(uri, data, self.s3)

    def exists(self, uri: str) -> bool:
        return object_exists(uri, self.s3)

    def get(self, uri: str) -> bytes | None:
        """The object's bytes, or ``None`` when it does not exist."""
        return read_object(uri, self.s3)

    def delete(self, uri: str) -> None:
        delete_object(uri, self.s3)

    def put_once(self, uri: str, data: bytes) -> str:
        if not self.exists(uri):
            self.put(uri, data)
        return uri

    def stage(self, spec: JobSpec, extra_modules: Iterable[str] = ()) -> StagedRun:
        """Upload the code bundle, the job script and the spec (with its result URI) for one run."""
        modules = [*spec.code_modules(), *extra_modules]
        bundle = code_bundle(modules)
        code_uri = self.put_once(self.uri("code", f"{hashlib.sha256(bundle).hexdigest()[:20]}.zip"), bundle)
        script = job_script()
        script_uri = self.put_once(
            self.uri("code", f"job_script-{hashlib.sha256(script).hexdigest()[:12]}.py"), script
        )
        run_dir = self.uri("runs", spec.identity.task_key, str(spec.identity.try_number))
        result_uri = f"{run_dir}/result.json"
        staged = dataclasses.replace(spec, result_uri=result_uri, code_uris=(code_uri,))  # type: ignore[type-var]
        spec_uri = f"{run_dir}/spec.json"
        self.delete(result_uri)  # a result left by an earlier submission of this try must not count
        self.put(spec_uri, staged.to_json().encode())
        return StagedRun(staged, spec_uri, script_uri, code_uri, result_uri)

    def result(self, result_uri: str) -> dict[str, Any] | None:
        raw = self.get(result_uri)
        return None if raw is None else parse_result(raw, result_uri)


class StagedResults:
    """``result()`` of every adapter: the job writes its result JSON beside its staged spec."""

    name: str
    stager: Stager

    def result(self, handle: JobHandle) -> dict[str, Any]:
        """The job's result JSON; :class:`JobFailedError` when the job wrote none."""
        data = self.stager.result(handle.result_uri)
        if data is None:
            raise JobFailedError(
                f"{self.name} job {describe_ids(handle)} wrote no result at {handle.result_uri}"
            )
        return data


def job_script() -> bytes:
    """The bytes of ``jobs/job_script.py``: uploaded as the service's script, never imported here."""
    # read as package data, not imported: the adapters stay below what runs inside the job
    return importlib.resources.files("airflow_provider_dltrain.jobs").joinpath("job_script.py").read_bytes()


def _module_root(module: str) -> tuple[Path, str]:
    """The file or top-level package directory holding ``module`` and its name inside the zip."""
    top = module.split(".", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise InvalidSpecError(f"cannot find module {top!r} to ship with the job; is it importable here?")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))), top
    return Path(spec.origin or ""), f"{top}.py"


def code_bundle(modules: Iterable[str]) -> bytes:
    """A deterministic zip of this provider package plus each module's top-level package (or file)."""
    roots = dict([_module_root("airflow_provider_dltrain"), *(_module_root(m) for m in modules)])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in sorted(roots.items(), key=lambda kv: kv[1]):
            files = [path] if path.is_file() else sorted(path.rglob("*.py"))
            for file in files:
                name = arcname if path.is_file() else f"{arcname}/{file.relative_to(path).as_posix()}"
                if "__pycache__" in name:
                    continue
                info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
                info.external_attr = 0o644 << 16
                zf.writestr(info, file.read_bytes(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
