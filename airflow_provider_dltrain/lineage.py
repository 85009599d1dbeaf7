"""Lineage of a prediction table version, from the bytes back to the ingest that produced them.

prediction version → model name/version → MLflow run → training ``DeltaRef`` and cut-off → ingest
commit (dag/run/task). Everything is read from the Delta logs and the MLflow registry; nothing is
kept on the side, so the chain is as true as the tables are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import TableNotFoundError
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.ref import millis_to_iso
from airflow_provider_dltrain.lake.storage import StorageOptions, normalize_uri

# How lineage reaches each table it reads: a callable ``uri -> options`` or a mapping by table URI.
OptionsByTable = Callable[[str], StorageOptions | None] | Mapping[str, StorageOptions | None]


def _resolver(
    storage_options: StorageOptions | None, by_table: OptionsByTable | None
) -> Callable[[str], StorageOptions | None]:
    """Each table's options: ``by_table``'s when given, else ``storage_options`` for every table."""
    if by_table is None:
        return lambda uri: storage_options
    if callable(by_table):
        return by_table
    table_options = {normalize_uri(k): v for k, v in by_table.items()}
    return lambda uri: table_options.get(normalize_uri(uri), storage_options)


def _committed_by(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("dag_id", "run_id", "task_id", "try_number", "logical_date")
    return {k: info.get(f"airflow.{k}") for k in keys if info.get(f"airflow.{k}") is not None}


def _commit(uri: str, version: int, storage_options: StorageOptions | None) -> dict[str, Any]:
    """One commit: its info and the partitions it added files to, from the table's history index (the
    commit file, or the copy kept beside the log once log retention removed it)."""
    from airflow_provider_dltrain.lake import history_index
    from airflow_provider_dltrain.lake.history_index import INDEX_DIR

    index = history_index.load(uri, storage_options)
    record = index.record(version) if index is not None else None
    if index is None or (record is None and version > index.indexed):
        raise TableNotFoundError(f"{uri} has no version {version} in its log or its history index")
    if record is None:
        raise TableNotFoundError(
            f"{uri} has no version {version} in its log or its history index: its commit file was removed by "
            f"the table's log retention and {INDEX_DIR}/ beside the log holds no copy of it (was the table "
            f"copied without that folder?). Copy {INDEX_DIR}/ over from the table it was copied from to see "
            "this link of the chain."
        )
    info = record["info"]
    partitions = sorted({json.dumps(p, sort_keys=True) for p in index.added_partitions(version)})
    return {
        "uri": index.uri,
        "version": version,
        "timestamp": millis_to_iso(info.get("timestamp")),
        "operation": info.get("operation"),
        "partitions": [json.loads(p) for p in partitions],
        "committed_by": _committed_by(info),
    }


def _model(tracking: Any, name: str, version: str) -> dict[str, Any]:
    client = tracking.client()
    mv = client.get_model_version(name, str(version))
    tags = dict(mv.tags or {})
    run = client.get_run(mv.run_id) if mv.run_id else None
    dataset = json.loads(tags["dltrain.delta_ref"]) if tags.get("dltrain.delta_ref") else None
    return {
        "name": name,
        "version": str(mv.version),
        "source": mv.source,
        "gate": {"decision": tags.get("dltrain.gate.decision"), "reason": tags.get("dltrain.gate.reason")},
        "champion_from": tags.get("dltrain.champion_from"),
        "run": {
            "run_id": mv.run_id,
            "experiment_id": run.info.experiment_id if run else None,
            "metrics": dict(run.data.metrics) if run else {},
            "trained_by": {k: tags.get(f"dltrain.{k}") for k in ("dag_id", "run_id", "logical_date")},
        },
        "training_data": dataset,
        "data_cutoff": tags.get("dltrain.data_cutoff"),
        "data_filter": json.loads(tags["dltrain.data_filter"]) if tags.get("dltrain.data_filter") else None,
        "data_fingerprint": tags.get("dltrain.data_fingerprint"),
    }


def _training_partitions(
    uri: str, version: int, data_filter: Any, storage_options: StorageOptions | None
) -> list[dict[str, Any]]:
    """Every partition the training data came from, with the commit that last wrote it (by whom, when).

    A restated partition shows up here with the restatement's version and run, so lineage says
    what changed since an earlier run.
    """
    from airflow_provider_dltrain.lake.filters import partition_may_select
    from airflow_provider_dltrain.lake.history import partition_column_types, partition_commits

    keys = ("dag_id", "run_id", "task_id", "try_number", "logical_date")
    # only partition columns decide, each compared in its type (the one predicate every reader uses)
    types = partition_column_types(uri, storage_options) if data_filter else None
    return [
        {**c, "committed_by": {k: c[k] for k in keys if c.get(k) is not None}}
        for c in partition_commits(uri, version, storage_options=storage_options)
        if partition_may_select(c.get("partition") or {}, data_filter, types)
    ]


def lineage(
    table_uri: str,
    version: int | None = None,
    tracking: Any = None,
    storage_options: StorageOptions | None = None,
    *,
    options_for: OptionsByTable | None = None,
) -> dict[str, Any]:
    """The lineage chain of ``version`` (default: newest) of a prediction table, as a JSON-able dict.

    Each table is read with its own options: ``options_for`` (a callable ``uri -> options`` or a
    mapping by table URI) when given; otherwise ``storage_options`` serves every table.
    """
    from airflow_provider_dltrain.store.config import TrackingConfig

    options = _resolver(storage_options, options_for)
    log = DeltaLog(table_uri, options(table_uri))
    newest = log.latest_version()
    if newest is None:
        raise TableNotFoundError(f"no Delta table at {table_uri}")
    version = newest if version is None else version
    prediction = _commit(table_uri, version, options(table_uri))
    from airflow_provider_dltrain.lake import history_index

    index = history_index.load(table_uri, options(table_uri))
    info = index.info(version) if index is not None else {}
    chain: dict[str, Any] = {"prediction": prediction}
    name, model_version = info.get("dltrain.model_name"), info.get("dltrain.model_version")
    if name and model_version:
        model = _model(tracking or TrackingConfig(), name, model_version)
        chain["model"] = model
        data = model.get("training_data")
        if data and data.get("uri") is not None:
            chain["training_commit"] = _commit(data["uri"], int(data["version"]), options(data["uri"]))
            chain["training_partitions"] = _training_partitions(
                data["uri"], int(data["version"]), model.get("data_filter"), options(data["uri"])
            )
    if info.get("dltrain.input_uri") and info.get("dltrain.input_version") is not None:
        input_uri = info["dltrain.input_uri"]
        chain["scored_input_commit"] = _commit(
            input_uri, int(info["dltrain.input_version"]), options(input_uri)
        )
        if chain.get("training_partitions") is not None:
            chain["changed_since_training"] = _changed_since_training(chain, options(input_uri))
    return chain


def _changed_since_training(
    chain: dict[str, Any], storage_options: StorageOptions | None
) -> list[dict[str, Any]]:
    """Partitions of the model's training selection whose content differs in the scored input version.

    Empty when the model was trained on exactly the data as it stood when these rows were scored. A
    restatement of an earlier partition after the model was trained shows up here: the model kept
    scoring because the gate judged it on the restated rows (or no run retrained since).
    """
    data = chain["model"]["training_data"]
    scored = chain["scored_input_commit"]
    if normalize_uri(scored["uri"]) != normalize_uri(data["uri"]) or scored["version"] == int(
        data["version"]
    ):
        return []
    trained = {_key(c): c for c in chain["training_partitions"]}
    now = _training_partitions(
        scored["uri"], scored["version"], chain["model"].get("data_filter"), storage_options
    )
    changed = []
    for c in now:
        before = trained.get(_key(c))
        same = before is not None and (
            (c.get("digest") and c.get("digest") == before.get("digest")) or c["version"] == before["version"]
        )
        if not same:
            changed.append(c)
    return changed


def _key(commit: dict[str, Any]) -> str:
    return json.dumps(commit.get("partition") or {}, sort_keys=True)


def _who(commit: dict[str, Any]) -> str:
    by = commit.get("committed_by") or {}
    if not by:
        return "(no Airflow metadata)"
    return f"{by.get('dag_id')} / {by.get('run_id')} / {by.get('task_id')} (try {by.get('try_number')})"


def format_lineage(chain: dict[str, Any]) -> str:
    """Human-readable rendering of :func:`lineage`."""
    p = chain["prediction"]
    lines = [
        f"predictions {p['uri']} version {p['version']} ({p['timestamp']}) partitions {p['partitions']}",
        f"  written by {_who(p)}",
    ]
    model = chain.get("model")
    if model:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(model["run"]["metrics"].items()))
        lines += [
            f"  <- model {model['name']} version {model['version']} (gate: {model['gate']['decision']}: "
            f"{model['gate']['reason']}; champion from {model['champion_from'] or '-'})",
            f"     <- MLflow run {model['run']['run_id']} (experiment {model['run']['experiment_id']}) {metrics}",
        ]
        data = model.get("training_data") or {}
        lines.append(
            f"        <- trained on {data.get('uri')} version {data.get('version')}, data cut-off {model['data_cutoff']}"
        )
        if chain.get("training_commit"):
            lines.append(
                f"           <- ingest commit version {chain['training_commit']['version']} by {_who(chain['training_commit'])}"
            )
        for c in chain.get("training_partitions") or []:
            where = ", ".join(f"{k}={v}" for k, v in sorted((c.get("partition") or {}).items()))
            lines.append(f"           <- {where}: version {c['version']} ({c.get('timestamp')}) by {_who(c)}")
    else:
        lines.append("  (this version names no model: it was not written by batch inference)")
    if chain.get("scored_input_commit"):
        c = chain["scored_input_commit"]
        lines.append(f"  <- scored input {c['uri']} version {c['version']} by {_who(c)}")
    changed = chain.get("changed_since_training")
    if changed:
        lines.append("  partitions changed since the model's training data (restated after it was trained):")
        for c in changed:
            where = ", ".join(f"{k}={v}" for k, v in sorted((c.get("partition") or {}).items()))
            lines.append(f"     {where}: version {c['version']} ({c.get('timestamp')}) by {_who(c)}")
    return "\n".join(lines)


def print_lineage(table_uri: str, version: int | None = None, tracking: Any = None) -> int:
    """CLI entry: print the chain; exit code 1 with a clear message when the table is missing."""
    try:
        print(format_lineage(lineage(table_uri, version, tracking=tracking)))
    except TableNotFoundError as err:
        print(f"error: {err}")
        return 1
    return 0
