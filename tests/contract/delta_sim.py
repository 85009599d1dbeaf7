"""Tiny Delta tables written by hand, fast enough for thousands of generated steps.

A commit here is one JSON file in ``_delta_log`` and one small Parquet file per partition written,
laid out as delta-rs lays them out (Hive directories, percent-encoded values, ``stats`` with
``numRecords``). The provider's own partition writes are mirrored key for key (``dltrain.partition``,
``dltrain.content_digest`` from the provider's digest, ``dltrain.rerun_facts``, the ``airflow.*``
lineage keys, the partition's ``txn`` entry), followed by the history-index update every provider
write makes (``history_index.update``). Another tool's write carries none of that. Checkpoints, log
clean-up and VACUUM are delta-rs's own. This module decides nothing: the oracle (:mod:`.model`)
says what a reader must get, the code under test is called by :mod:`.harness`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

# partition column type -> (Arrow type, Delta type)
TYPES = {
    "string": (pa.string(), "string"),
    "date": (pa.date32(), "date"),
    "int": (pa.int64(), "long"),
    "timestamp": (pa.timestamp("us", tz="UTC"), "timestamp"),
}
COLUMN = "p"
DAY_MS = 86_400_000


def log_text(kind: str, value: Any) -> str:
    """A partition value as the Delta log writes it."""
    if kind == "date":
        return value.isoformat()
    if kind == "timestamp":
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


class SimTable:
    """One table, its files and log, written step by step (one writer at a time)."""

    def __init__(self, root: str, kind: str, configuration: Mapping[str, str], start_ms: int) -> None:
        self.root = root
        self.kind = kind
        self.configuration = dict(configuration)
        self.version = -1
        self.clock_ms = start_ms
        self.extra = False  # the column added by schema evolution
        self.live: dict[str, list[dict[str, Any]]] = {}  # partition text -> add actions of its files
        self.size = 0
        os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)

    # -- layout ---------------------------------------------------------------------------------
    def _schema_string(self) -> str:
        fields = [
            {"name": COLUMN, "type": TYPES[self.kind][1], "nullable": True, "metadata": {}},
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "long", "nullable": True, "metadata": {}},
        ]
        if self.extra:
            fields.append({"name": "extra", "type": "long", "nullable": True, "metadata": {}})
        return json.dumps({"type": "struct", "fields": fields})

    def _metadata(self) -> dict[str, Any]:
        return {
            "metaData": {
                "id": "00000000-0000-0000-0000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": self._schema_string(),
                "partitionColumns": [COLUMN],
                "configuration": self.configuration,
                "createdTime": self.clock_ms,
            }
        }

    def _data_file(self, text: str, rows: list[tuple[int, int, Any]], extra: bool) -> dict[str, Any]:
        folder = f"{COLUMN}={quote(text, safe='')}"
        name = f"part-{uuid.uuid4().hex}.parquet"
        os.makedirs(os.path.join(self.root, folder), exist_ok=True)
        columns: dict[str, Any] = {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "value": pa.array([r[1] for r in rows], pa.int64()),
        }
        if extra:
            columns["extra"] = pa.array([r[2] for r in rows], pa.int64())
        pq.write_table(pa.table(columns), os.path.join(self.root, folder, name))
        size = os.path.getsize(os.path.join(self.root, folder, name))
        return {
            "path": quote(f"{folder}/{name}", safe="/="),
            "partitionValues": {COLUMN: text},
            "size": size,
            "modificationTime": self.clock_ms,
            "dataChange": True,
            "stats": json.dumps({"numRecords": len(rows)}),
        }

    def _commit(self, actions: list[dict[str, Any]], info: Mapping[str, Any]) -> int:
        self.version += 1
        self.clock_ms += 60_000
        commit_info = {"timestamp": self.clock_ms, **info}
        lines = [json.dumps({"commitInfo": commit_info}), *(json.dumps(a) for a in actions)]
        path = os.path.join(self.root, "_delta_log", f"{self.version:020d}.json")
        with open(path, "w") as out:
            out.write("\n".join(lines) + "\n")
        return self.version

    def _removes(self, text: str, data_change: bool = True) -> list[dict[str, Any]]:
        return [
            {
                "remove": {
                    "path": add["path"],
                    "partitionValues": add["partitionValues"],
                    "deletionTimestamp": self.clock_ms,
                    "dataChange": data_change,
                    "extendedFileMetadata": True,
                    "size": add["size"],
                }
            }
            for add in self.live.get(text, [])
        ]

    # -- steps ----------------------------------------------------------------------------------
    def create(self) -> None:
        protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
        self._commit([protocol, self._metadata()], {"operation": "CREATE TABLE"})

    def next_day(self) -> None:
        self.clock_ms += DAY_MS

    def write(
        self, text: str, rows: list[tuple[int, int, Any]], info: Mapping[str, Any], *, mode: str = "overwrite"
    ) -> int:
        """Overwrite (or append to) one partition in one commit; ``info`` is the commit's metadata."""
        add = self._data_file(text, rows, self.extra)
        actions: list[dict[str, Any]] = []
        if mode == "overwrite":
            actions += self._removes(text)
            self.live[text] = []
        if "txn" in info:
            actions.append({"txn": info["txn"]})
        actions.append({"add": add})
        self.live.setdefault(text, []).append(add)
        body = {k: v for k, v in info.items() if k != "txn"}
        return self._commit(actions, {"operation": "WRITE", **body})

    def compact(
        self, texts: list[str], rows_of: Mapping[str, list[tuple[int, int, Any]]], zorder: bool
    ) -> int:
        """OPTIMIZE (or Z-order): each partition's files rewritten into one, ``dataChange: false``."""
        actions: list[dict[str, Any]] = []
        for text in texts:
            actions += self._removes(text, data_change=False)
            add = {**self._data_file(text, rows_of[text], self.extra), "dataChange": False}
            self.live[text] = [add]
            actions.append({"add": add})
        params = {"zOrderBy": json.dumps(["id"])} if zorder else {"targetSize": "104857600"}
        operation = "Z-ORDER" if zorder else "OPTIMIZE"
        return self._commit(actions, {"operation": "OPTIMIZE", "operationParameters": {operation: params}})

    def add_column(self) -> int:
        """ALTER TABLE ADD COLUMN ``extra``: a metaData commit, no file touched."""
        self.extra = True
        return self._commit([self._metadata()], {"operation": "ADD COLUMN"})

    # -- maintenance by delta-rs ------------------------------------------------------------------
    def checkpoint(self, spark_every: int | None) -> int | None:
        """A checkpoint at the newest version (delta-rs) or at the newest multiple of ``spark_every``."""
        from deltalake import DeltaTable

        at = self.version if spark_every is None else self.version - self.version % spark_every
        names = os.listdir(os.path.join(self.root, "_delta_log"))
        newest = max((int(n.split(".")[0]) for n in names if ".checkpoint" in n), default=0)
        if at <= newest or not self.commit_exists(at):  # Delta Spark made that one at the time
            return None
        DeltaTable(self.root, version=at).create_checkpoint()
        return at

    def expire_log(self, before: int) -> list[int]:
        """What log retention does after a checkpoint: commit files older than it are deleted."""
        from deltalake import DeltaTable

        old = (dt.datetime.now() - dt.timedelta(days=10_000)).timestamp()
        for v in range(before):
            path = os.path.join(self.root, "_delta_log", f"{v:020d}.json")
            if os.path.exists(path):
                os.utime(path, (old, old))
        table = DeltaTable(self.root)
        table.cleanup_metadata()
        return [v for v in range(self.version + 1) if not self.commit_exists(v)]

    def commit_exists(self, version: int) -> bool:
        return os.path.exists(os.path.join(self.root, "_delta_log", f"{version:020d}.json"))

    def file_exists(self, add: Mapping[str, Any]) -> bool:
        from urllib.parse import unquote

        return os.path.exists(os.path.join(self.root, unquote(add["path"])))

    # -- the history index ----------------------------------------------------------------------
    def index_dir(self) -> str:
        return os.path.join(self.root, "_dltrain_history")

    def drop_index(self) -> None:
        shutil.rmtree(self.index_dir(), ignore_errors=True)

    def head_text(self) -> str | None:
        try:
            with open(os.path.join(self.index_dir(), "head.json")) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put_head(self, text: str) -> None:
        with open(os.path.join(self.index_dir(), "head.json"), "w") as f:
            f.write(text)

    def recorded_versions(self) -> set[int]:
        folder = os.path.join(self.index_dir(), "commits")
        if not os.path.isdir(folder):
            return set()
        return {int(name.split(".")[0]) for name in os.listdir(folder) if name.endswith(".json")}
