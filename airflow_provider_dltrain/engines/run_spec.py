"""``RunSpec``: everything a job needs to run one ETL or scoring stage, as versioned JSON.

The operator builds a spec; an engine adapter only moves it (and the code) to where the job runs;
the job's entry point reads it back and runs the same stage code as the local engine. A spec holds
no secrets: a cloud job reaches its tables with its own role (or environment), never with
credentials copied out of an Airflow connection.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from airflow_provider_dltrain.exceptions import InvalidSpecError

SPEC_VERSION = 1
STAGES = ("etl", "score")


@dataclass(frozen=True)
class RunIdentity:
    """Which Airflow task a job belongs to; names and tags every cloud resource it creates."""

    dag_id: str = "adhoc"
    run_id: str = "adhoc"
    task_id: str = "adhoc"
    map_index: int = -1
    try_number: int = 1
    logical_date: str | None = None

    @property
    def task_key(self) -> str:
        """Stable across tries of one task instance: a retry finds the job an earlier try started."""
        text = f"{self.dag_id}\x1f{self.run_id}\x1f{self.task_id}\x1f{self.map_index}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def job_name(self) -> str:
        """``dltrain-<task>-<key>-t<try>``: readable, unique per try, within every service's limits."""
        task = re.sub(r"[^A-Za-z0-9-]+", "-", self.task_id).strip("-")[:24] or "task"
        return f"dltrain-{task}-{self.task_key}-t{self.try_number}"

    def tags(self) -> dict[str, str]:
        """Tags every cloud resource of this task carries (what ``dltrain reap`` looks for)."""
        return {
            "dltrain:run_id": self.run_id[:256],
            "dltrain:dag_id": self.dag_id[:256],
            "dltrain:task_id": self.task_id[:256],
            "dltrain:map_index": str(self.map_index),
            "dltrain:task_key": self.task_key,
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> RunIdentity | None:
        if "dltrain:run_id" not in tags:
            return None
        return cls(
            dag_id=tags.get("dltrain:dag_id", "adhoc"),
            run_id=tags["dltrain:run_id"],
            task_id=tags.get("dltrain:task_id", "adhoc"),
            map_index=int(tags.get("dltrain:map_index", "-1")),
        )


class JobSpec(Protocol):
    """What every job spec is to the launcher and the adapters: a stage's :class:`RunSpec` or a
    training job's ``TrainJobSpec``. The stager fills ``result_uri`` and ``code_uris`` (a copy with
    ``dataclasses.replace``); the job reads its spec back from JSON."""

    @property
    def identity(self) -> RunIdentity: ...

    @property
    def result_uri(self) -> str | None: ...

    @property
    def code_uris(self) -> tuple[str, ...]: ...

    def code_modules(self) -> list[str]:
        """The modules the job imports besides this package (shipped in its code bundle)."""
        ...

    def to_json(self) -> str: ...


@dataclass(frozen=True)
class RunSpec:
    """One stage run. ``stage`` is ``"etl"`` or ``"score"``; ``params`` holds that stage's arguments.

    ``etl`` params: ``transform`` (``"package.module:function"``), ``inputs``, ``transform_params``,
    ``write`` (:class:`~airflow_provider_dltrain.etl.write_options.DeltaWriteOptions` as a dict),
    ``spark_conf``. ``score`` params: ``model`` (``name``, ``version``, ``model_uri``, ``load_uri``),
    ``input`` (a DeltaRef dict), ``input_filter``, ``scoring``, ``allow_pickle``, ``tracking_uri``.
    """

    stage: str
    table_uri: str
    partition: dict[str, str]
    params: dict[str, Any]
    identity: RunIdentity = field(default_factory=RunIdentity)
    metadata: dict[str, str] = field(default_factory=dict)
    result_uri: str | None = None
    code_uris: tuple[str, ...] = ()
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise InvalidSpecError(f"RunSpec.stage must be one of {STAGES}, got {self.stage!r}")
        if not self.table_uri:
            raise InvalidSpecError("RunSpec.table_uri is empty")
        if not self.partition:
            raise InvalidSpecError("RunSpec.partition is empty: name the partition the stage replaces")

    def code_modules(self) -> list[str]:
        """An ETL stage's transform module (the job imports it); scoring needs only this package."""
        transform = self.params.get("transform")
        if self.stage != "etl":
            return []
        if not isinstance(transform, str) or ":" not in transform:
            raise InvalidSpecError(
                f"transform must be 'package.module:function' for a cloud engine (the job imports it), "
                f"got {transform!r:.120}"
            )
        return [transform.split(":", 1)[0]]

    def to_json(self) -> str:
        """The spec as JSON; refuses values JSON cannot carry (a callable transform, say)."""
        try:
            return json.dumps(asdict(self), sort_keys=True, indent=1)
        except TypeError as err:
            raise InvalidSpecError(
                f"the run spec must be plain JSON for a job to read it ({err}); pass the transform as "
                "'package.module:function' and inputs/params as plain values"
            ) from err

    @classmethod
    def from_json(cls, text: str | bytes) -> RunSpec:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InvalidSpecError(f"run spec is not JSON: {err}") from err
        if not isinstance(data, dict):
            raise InvalidSpecError(f"run spec must be a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != SPEC_VERSION:
            raise InvalidSpecError(
                f"run spec version {version!r} is not {SPEC_VERSION}: the job runs another release of "
                "airflow-provider-dltrain than the one that wrote the spec; install the same version on both"
            )
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidSpecError(f"run spec has unknown key(s) {unknown}")
        data["identity"] = RunIdentity(**data.get("identity") or {})
        data["code_uris"] = tuple(data.get("code_uris") or ())
        return cls(**data)
