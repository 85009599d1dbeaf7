"""Skip a stage that would rewrite its partition with the content it holds: no Spark, no job, no model.

Before an ETL or scoring stage starts Spark or submits a cloud job, the operator establishes cheap
facts the partition's content follows from and compares them with the facts recorded in the commit
that last wrote the partition (:mod:`~airflow_provider_dltrain.lake.rerun_facts`). Equal: the
stage's result is that commit's version with ``committed: False``, ``skipped: True`` and the
reason, and nothing starts. Otherwise the stage runs as it always did, and its commit records the
new facts and what changed (``dltrain.rerun_facts``, ``dltrain.rerun_changed``).

"Unchanged" means all of these are equal:

* ETL: every raw input's listing fingerprint (:mod:`~airflow_provider_dltrain.etl.input_listing`);
  every DVC input's commit and DVC content hash (:mod:`~airflow_provider_dltrain.etl.dvc_inputs`);
  every Delta input's version fingerprint at its pinned version (the content digests its
  partitions' commits recorded, else their files); the transform's code hash (its module and the
  modules of its code base it imports, as for training); the parameters (transform name,
  ``transform_params``, the inputs' paths, formats, options and filters, ``write``,
  ``spark_conf``; not a Delta input's version, whose content counts instead);
* scoring: the model (name, version and URI); the input table and version (every scored row records
  it) and the version fingerprint of the rows ``input_filter`` selects; ``input_filter``, the
  scoring spec and ``allow_pickle``; the code hash of the provider's scoring code;
* both: the provider's release; the commit that last touched the partition is one of this
  provider's writes of exactly that partition and recorded these facts; no later commit changed
  the table's metadata (schema, partitioning, properties); and the partition's quarantine is the
  one that belongs to that commit (a kill between the two commits is repaired by running).

A partition that another tool wrote or deleted from since, or that was written before facts were
recorded, is computed. So is any run whose facts cannot be established (an input path that does not
exist, a transform without a source file) and any run given ``force=True``. A run that computes and
finds the same content commits nothing (the content digest check), so its new facts are not
recorded either: after inputs were touched without changing, re-runs compute until the content does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.run_spec import RunSpec
from airflow_provider_dltrain.lake.rerun_facts import META_RERUN_CHANGED, META_RERUN_FACTS, LastWrite
from airflow_provider_dltrain.lake.storage import StorageOptions

logger = logging.getLogger(__name__)
# bumped whenever the facts change meaning: older records never match (v2: a Delta input's fingerprint
# no longer counts files, so a compaction keeps it; it can come from the history index alone)
SCHEME = "dltrain-rerun-v2"
SCORING_CODE = "airflow_provider_dltrain.inference.scoring:score_table"
Storage = Callable[[str], StorageOptions | None]


def _no_storage(uri: str) -> StorageOptions | None:
    return None


@dataclass(frozen=True)
class RerunCheck:
    """The decision: ``result`` (the stage's result, nothing to run) or the facts the run records."""

    facts: dict[str, Any] | None  # None: not established, nothing is recorded
    reason: str  # one line: why it is skipped (which facts matched) or why it runs
    result: dict[str, Any] | None = None
    changed: str = ""  # recorded with the facts: what changed since the last write
    recorded: dict[str, Any] | None = None  # the facts the last write recorded (what ``facts`` differ from)
    since: dict[str, Any] | None = None  # that write: table version and the Airflow run that made it

    @property
    def skipped(self) -> bool:
        return self.result is not None

    def metadata(self) -> dict[str, str]:
        """Commit metadata for the write this run makes (empty when no facts were established)."""
        if self.facts is None:
            return {}
        text = json.dumps(self.facts, sort_keys=True, separators=(",", ":"))
        return {META_RERUN_FACTS: text, META_RERUN_CHANGED: self.changed}

    def apply(self, spec: RunSpec) -> RunSpec:
        """``spec`` whose commit records the facts (they travel to a cloud job with the spec)."""
        return dataclasses.replace(spec, metadata={**spec.metadata, **self.metadata()})


def check_etl(
    spec: RunSpec,
    storage: Storage | None = None,
    *,
    transform: Callable[..., Any] | None = None,
    force: bool = False,
) -> RerunCheck:
    """Whether the ETL ``spec`` would rewrite its partition with the content it holds (see the module)."""
    from airflow_provider_dltrain.etl.writer import default_quarantine_uri

    resolve = storage or _no_storage
    options = spec.params.get("write") or {}
    quarantine = options.get("quarantine_uri") or default_quarantine_uri(spec.table_uri)
    warn_short_retention(spec.table_uri, resolve, options.get("backfill_horizon_days"))
    facts, missing = _established(lambda: _etl_facts(spec, resolve, transform))
    return _decide(spec.table_uri, spec.partition, facts, missing, resolve, force, quarantine, _etl_result)


def check_score(
    table_uri: str,
    partition: Mapping[str, str],
    params: Mapping[str, Any],
    storage: Storage | None = None,
    *,
    force: bool = False,
) -> RerunCheck:
    """Whether scoring would rewrite ``partition`` with the content it holds (see the module).

    :param params: the ``score`` stage's :class:`RunSpec` params (``model``, ``input``,
        ``input_filter``, ``scoring``, ``allow_pickle``); nothing else is read.
    """
    from airflow_provider_dltrain.etl.writer import default_quarantine_uri

    resolve = storage or _no_storage
    warn_short_retention(table_uri, resolve)
    facts, missing = _established(lambda: _score_facts(params, resolve))
    quarantine = default_quarantine_uri(table_uri)

    def result(last: LastWrite, reason: str, pairing: Any) -> dict[str, Any]:
        model = params.get("model") or {}
        return {
            **last.ref.to_dict(),
            "committed": False,
            "skipped": True,
            "reason": reason,
            "model_name": model.get("name"),
            "model_version": model.get("version"),
        }

    return _decide(table_uri, partition, facts, missing, resolve, force, quarantine, result)


def warn_short_retention(table_uri: str, storage: Storage, days: int | None = None) -> list[str]:
    """Log (and return) a warning for each retention property of the table shorter than the backfill
    horizon, before the run uses it (nothing for a table that does not exist yet)."""
    from airflow_provider_dltrain.lake.retention import check_table

    try:
        warnings = check_table(table_uri, storage(table_uri), days)
    except Exception as err:  # a warning must never stop the run: the stage reports real errors
        logger.debug("retention of %s not checked: %s", table_uri, err)
        return []
    for warning in warnings:
        logger.warning("%s", warning)
    return warnings


# -- facts ------------------------------------------------------------------------------------------
def _established(
    build: Callable[[], tuple[dict[str, Any] | None, str]],
) -> tuple[dict[str, Any] | None, str]:
    try:
        return build()
    except Exception as err:  # never fail a run the stage itself would run: it computes instead
        return None, f"its facts could not be established ({type(err).__name__}: {err})"


def _base(stage: str, code: str) -> dict[str, Any]:
    from airflow_provider_dltrain.version import __version__

    return {"scheme": SCHEME, "provider": __version__, "stage": stage, "code": code}


def _etl_facts(
    spec: RunSpec, storage: Storage, transform: Callable[..., Any] | None
) -> tuple[dict[str, Any] | None, str]:
    from airflow_provider_dltrain.etl.input_listing import listing_fingerprint
    from airflow_provider_dltrain.etl.inputs import check_filters, delta_rs_filters, is_delta_spec
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.lake.rerun_facts import version_fingerprint
    from airflow_provider_dltrain.utils.hashing import code_identity, named_code_hash, params_hash

    p = spec.params
    name = str(p.get("transform"))
    code = code_identity(transform).hash if callable(transform) else named_code_hash(name)
    if code is None:
        return None, f"the transform {name!r} has no source file here to hash"
    inputs: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for key, value in sorted(dict(p.get("inputs") or {}).items()):
        if is_delta_spec(value):
            given = value.to_dict() if isinstance(value, DeltaRef) else dict(value)
            ref = DeltaRef.coerce(given)
            dnf = check_filters(given.get("filters"), f"inputs[{key!r}].filters")
            inputs[key] = {
                "kind": "delta",
                **version_fingerprint(ref, delta_rs_filters(dnf), storage(ref.uri)),
            }
            plain[key] = {k: v for k, v in given.items() if k not in ("version", "timestamp")}
            continue
        if isinstance(value, Mapping) and "dvc" in value:  # a DVC-tracked file: its commit and md5
            from airflow_provider_dltrain.etl.dvc_inputs import dvc_facts, dvc_params

            inputs[key], plain[key] = dvc_facts(key, value), dvc_params(value)
            continue
        path = str(value if isinstance(value, str) else dict(value).get("path"))
        listing = listing_fingerprint(path, storage(path))
        if listing is None:
            return (
                None,
                f"input {key!r} has no listing at {path} (nothing there, or not a local or s3:// path)",
            )
        inputs[key], plain[key] = listing.to_dict(), value
    params = {**{k: v for k, v in p.items() if k != "inputs"}, "inputs": plain}
    return {**_base("etl", code), "params": params_hash(params), "inputs": inputs}, ""


def _score_facts(params: Mapping[str, Any], storage: Storage) -> tuple[dict[str, Any] | None, str]:
    from airflow_provider_dltrain.etl.inputs import check_filters, delta_rs_filters
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.lake.rerun_facts import version_fingerprint
    from airflow_provider_dltrain.utils.hashing import named_code_hash, params_hash

    code = named_code_hash(SCORING_CODE)
    if code is None:
        return None, "the provider's scoring code has no source file here to hash"
    model = dict(params["model"])
    ref = DeltaRef.coerce(dict(params["input"]))
    dnf = check_filters(params.get("input_filter"), "input_filter")
    content = version_fingerprint(ref, delta_rs_filters(dnf), storage(ref.uri))
    settings = {k: params.get(k) for k in ("scoring", "input_filter", "allow_pickle")}
    return {
        **_base("score", code),
        "model": {k: model.get(k) for k in ("name", "version", "model_uri")},
        "input": {"uri": ref.uri, "version": ref.version, **content},
        "params": params_hash(settings),
    }, ""


def _changed(recorded: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """The facts that differ, by name (``inputs.<name>`` per ETL input)."""
    out = []
    for key in sorted(set(recorded) | set(facts)):
        old, new = recorded.get(key), facts.get(key)
        if key == "inputs" and isinstance(old, Mapping) and isinstance(new, Mapping):
            out += [
                f"inputs.{name}" for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)
            ]
        elif old != new:
            out.append(key)
    return out


def _matched(facts: Mapping[str, Any]) -> str:
    """What was compared, for the log line: ``input listings (images: 200 files), ... code, params``."""
    if facts["stage"] == "score":
        model, data = facts["model"], facts["input"]
        return (
            f"model {model['name'] or model['model_uri']} v{model['version']}, input {data['uri']} "
            f"v{data['version']} ({data['partitions']} partition(s)), "
            "scoring parameters and code"
        )
    inputs = []
    for name, item in sorted(facts["inputs"].items()):
        if item["kind"] == "delta":
            what = f"{item['partitions']} partition(s) of a Delta version"
        elif item["kind"] == "dvc":
            what = f"{item['path']} at commit {item['commit'][:12]} (md5 {item['md5'][:12]})"
        else:
            what = f"{item['files']} file(s)"
        inputs.append(f"{name}: {what}")
    return f"inputs ({', '.join(inputs) or 'none'}), transform code and parameters"


# -- the decision -----------------------------------------------------------------------------------
def _decide(
    table_uri: str,
    partition: Mapping[str, str],
    facts: dict[str, Any] | None,
    missing: str,
    storage: Storage,
    force: bool,
    quarantine_uri: str,
    result: Callable[[LastWrite, str, Any], dict[str, Any]],
) -> RerunCheck:
    from airflow_provider_dltrain.lake import partition as part
    from airflow_provider_dltrain.lake.pairing import quarantine_pairing
    from airflow_provider_dltrain.lake.rerun_facts import facts_lost_error, last_write

    where = f"{part.path_of(dict(partition), sorted(partition))} of {table_uri}"
    if facts is None:
        return RerunCheck(None, f"{where}: running the stage: {missing}")
    if force:
        return RerunCheck(facts, f"{where}: running the stage: force=True", changed="force")
    options = storage(table_uri)
    last = last_write(table_uri, partition, options)
    if last is None:
        return RerunCheck(facts, f"{where}: running the stage: no earlier write of it", changed="first write")
    if last.facts_lost:  # not "another tool": this provider's answer may be there, unprovable now
        raise facts_lost_error(table_uri, where, last.ref.version)
    version = last.ref.version
    recorded = last.recorded_facts() if last.wrote(partition) else None
    if recorded is None:
        why = f"its last commit (version {version}) recorded no facts (another tool, or an older release)"
        return RerunCheck(facts, f"{where}: running the stage: {why}", changed="no recorded facts")
    since = _since(last)
    changed = _changed(recorded, facts)
    if changed:
        why = f"changed since version {version}: {', '.join(changed)}"
        return RerunCheck(
            facts,
            f"{where}: running the stage: {why}",
            changed=",".join(changed),
            recorded=recorded,
            since=since,
        )
    if last.metadata_changed_since:
        why = f"the table's schema, partitioning or properties changed after version {version}"
        return RerunCheck(facts, f"{where}: running the stage: {why}", changed="table metadata")
    pairing = quarantine_pairing(table_uri, quarantine_uri, partition, storage_options=options)
    if pairing.state == "lost" and pairing.quarantine is not None:
        where_q = f"{where}: its quarantine partition in {quarantine_uri}"
        raise facts_lost_error(quarantine_uri, where_q, pairing.quarantine.version)
    if pairing.state == "stale":
        why = f"its quarantine partition in {quarantine_uri} belongs to another write"
        return RerunCheck(facts, f"{where}: running the stage: {why}", changed="stale quarantine")
    info = last.info
    who = f" by {info['airflow.dag_id']} {info['airflow.run_id']}" if info.get("airflow.run_id") else ""
    reason = (
        f"{where} unchanged since version {version}{who}: same {_matched(facts)}; "
        f"returning version {version} (committed: false), no Spark session or job started"
    )
    return RerunCheck(facts, reason, result=result(last, reason, pairing), recorded=recorded, since=since)


def _since(last: LastWrite) -> dict[str, Any]:
    """The write a decision compares with: its version and the Airflow task that committed it."""
    keys = ("dag_id", "run_id", "task_id", "try_number")
    return {
        "uri": last.ref.uri,
        "version": last.ref.version,
        **{k: last.info[f"airflow.{k}"] for k in keys if last.info.get(f"airflow.{k}") is not None},
    }


def _etl_result(last: LastWrite, reason: str, pairing: Any) -> dict[str, Any]:
    """What the ETL stage returns for an unchanged partition, shaped like its computed result."""
    from airflow_provider_dltrain.lake.digest import META_DIGEST
    from airflow_provider_dltrain.lake.pairing import META_ROWS_QUARANTINED

    info = last.info
    return {
        **last.ref.to_dict(),
        "committed": False,
        "skipped": True,
        "reason": reason,
        "digest": info.get(META_DIGEST),
        "rows_written": last.rows,
        "rows_quarantined": int(info.get(META_ROWS_QUARANTINED) or 0),
        "files_written": 0,
        "quarantine": pairing.quarantine.to_dict() if pairing.quarantine is not None else None,
        "quarantine_committed": False,
        "quarantine_reasons": {},
    }
