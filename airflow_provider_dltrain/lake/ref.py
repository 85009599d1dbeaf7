"""``DeltaRef``: one exact version of one Delta table, the reference every task passes on."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError


@dataclass(frozen=True)
class DeltaRef:
    """One exact version of one Delta table.

    :param uri: table location, a local path or ``s3://bucket/prefix``.
    :param version: the Delta version (commit number), ``>= 0``.
    :param timestamp: commit time of that version, ISO-8601 UTC, when known.
    """

    uri: str
    version: int
    timestamp: str | None = None

    def __post_init__(self) -> None:
        if not self.uri or not isinstance(self.uri, str):
            raise InvalidSpecError("DeltaRef.uri must be a non-empty table location")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise InvalidSpecError(f"DeltaRef.version must be an integer >= 0, got {self.version!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeltaRef:
        missing = {"uri", "version"} - set(data)
        if missing:
            raise InvalidSpecError(f"a DeltaRef needs keys {sorted(missing)}; got {sorted(data)}")
        return cls(uri=str(data["uri"]), version=int(data["version"]), timestamp=data.get("timestamp"))

    @classmethod
    def from_json(cls, text: str) -> DeltaRef:
        return cls.from_dict(json.loads(text))

    @classmethod
    def coerce(cls, value: DeltaRef | dict[str, Any] | str) -> DeltaRef:
        """Accept a ``DeltaRef``, its dict (as pulled from XCom) or its JSON text."""
        if isinstance(value, DeltaRef):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        if isinstance(value, str) and value.lstrip().startswith("{"):
            return cls.from_json(value)
        raise InvalidSpecError(
            f"expected a DeltaRef, its dict or its JSON; got {type(value).__name__}: {value!r:.120}"
        )


def millis_to_iso(millis: int | None) -> str | None:
    if millis is None:
        return None
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat()
