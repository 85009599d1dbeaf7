"""Write a real Delta deletion vector (inline, RoaringBitmapArray) — delta-rs 1.6 rewrites files on
delete instead, so this is how tests get a version whose Parquet files still hold deleted rows.
Also column mapping, which delta-rs cannot enable either."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chars = []
        for _ in range(5):
            chars.append(_Z85[value % 85])
            value //= 85
        out.append("".join(reversed(chars)))
    return "".join(out)


def _bitmap(rows: list[int]) -> bytes:
    """Delta's RoaringBitmapArray of row indices < 65536: one 32-bit bitmap, one array container."""
    rows = sorted(rows)
    body = struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, len(rows) - 1) + struct.pack("<I", 16)
    body += b"".join(struct.pack("<H", r) for r in rows)
    return struct.pack("<i", 1681511377) + struct.pack("<q", 1) + struct.pack("<i", 0) + body


def delete_with_deletion_vector(table_dir: str, partition: dict[str, str], rows: list[int]) -> int:
    """Commit a deletion vector dropping ``rows`` (indices) of the one file of ``partition``."""
    log_dir = Path(table_dir) / "_delta_log"
    commits = sorted(log_dir.glob("*.json"))
    adds = {}
    for commit in commits:
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                adds.pop(action["remove"]["path"], None)
    (add,) = [a for a in adds.values() if a["partitionValues"] == partition]
    data = _bitmap(rows)
    now = int(time.time() * 1000)
    dv = {
        "storageType": "i",
        "pathOrInlineDv": _z85(data + b"\0" * (-len(data) % 4)),
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }
    remove = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add["partitionValues"],
        "size": add["size"],
    }
    version = len(commits)
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE"}},
        {"remove": remove},
        {"add": {**add, "deletionVector": dv, "dataChange": True, "modificationTime": now}},
    ]
    (log_dir / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return version


def enable_column_mapping(table_dir: str) -> int:
    """Commit the metadata change that turns on column mapping (mode ``name``); return its version."""
    log_dir = Path(table_dir) / "_delta_log"
    first = (log_dir / f"{0:020d}.json").read_text().splitlines()
    meta = next(json.loads(line)["metaData"] for line in first if "metaData" in line)
    schema = json.loads(meta["schemaString"])
    for i, field in enumerate(schema["fields"], start=1):
        field["metadata"] = {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": field["name"]}
    meta["schemaString"] = json.dumps(schema)
    meta["configuration"] = {
        **(meta.get("configuration") or {}),
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": str(len(schema["fields"])),
    }
    version = len(sorted(log_dir.glob("*.json")))
    actions = [{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}, {"metaData": meta}]
    (log_dir / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return version
