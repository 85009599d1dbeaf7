"""What a stage does, wherever it runs: the local engine and every cloud job call these functions.

``run_stage(spec)`` reads the inputs, runs the transform (or the scoring UDF) on the Spark session it
is given and commits one partition through delta-rs. Storage credentials come from ``storage``:
the Airflow worker resolves them from connections; a cloud job passes ``None`` and reaches S3 with its
own role (or ``AWS_*`` environment), so no secret ever travels inside a spec.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.engines.run_spec import RunSpec
from airflow_provider_dltrain.etl.write_options import check_write_options
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.store.config import TrackingConfig

log = logging.getLogger(__name__)

StorageResolver = Callable[[str], StorageOptions | None]


def _no_storage(uri: str) -> StorageOptions | None:
    return None


def run_stage(
    spec: RunSpec,
    *,
    spark: Any = None,
    storage: StorageResolver | None = None,
    transform: Callable[..., Any] | None = None,
    tracking: TrackingConfig | None = None,
) -> dict[str, Any]:
    """Run ``spec`` and return the result an operator hands to XCom (a ``DeltaRef`` dict plus counts).

    :param spark: the session to use (default: ``etl.spark_session`` with the spec's ``spark_conf``).
    :param storage: ``uri -> storage options`` (default: none, the environment's credentials).
    :param transform: the transform callable itself, for a local run given a function, not a name.
    :param tracking: the MLflow store (with credentials) scoring loads ``model_uri`` from; default:
        load the pinned version's artifacts from ``load_uri``, which needs no tracking credentials.
    """
    resolve = storage or _no_storage
    if spec.stage == "etl":
        return _run_etl(spec, spark, resolve, transform)
    return _run_score(spec, spark, resolve, tracking)


def _session(spark: Any, conf: Mapping[str, str] | None) -> Any:
    if spark is not None:
        return spark
    from airflow_provider_dltrain.etl.spark import spark_session

    return spark_session(conf=conf)


def _run_etl(
    spec: RunSpec, spark: Any, storage: StorageResolver, transform: Callable[..., Any] | None
) -> dict[str, Any]:
    from airflow_provider_dltrain.etl import read_inputs, run_transform, write_dataframe
    from airflow_provider_dltrain.etl.inputs import check_inputs, input_uri
    from airflow_provider_dltrain.etl.landing_reads import release_staged
    from airflow_provider_dltrain.etl.transform import landing_refusals

    p = spec.params
    options = check_write_options(p.get("write") or {}, spec.partition)  # before any input is read
    inputs: dict[str, Any] = dict(p.get("inputs") or {})
    check_inputs(inputs)
    per_input = {name: storage(uri) for name, s in inputs.items() if (uri := input_uri(s))}
    session = _session(spark, p.get("spark_conf"))
    log.info("reading inputs %s", sorted(inputs))
    frames = read_inputs(session, inputs, storage(spec.table_uri), input_storage_options=per_input)
    df = run_transform(session, transform or p["transform"], frames, p.get("transform_params") or {})
    if options.get("num_files"):
        df = df.coalesce(int(options["num_files"]))
    partition_by = options.get("partition_by")
    try:
        result = write_dataframe(
            df,
            spec.table_uri,
            spec.partition,
            partition_by=list(partition_by) if partition_by else None,
            schema_mode=options.get("schema_mode", "strict"),
            metadata=spec.metadata,
            storage_options=storage(spec.table_uri),
            quarantine_uri=options.get("quarantine_uri"),
            max_bad_fraction=float(options.get("max_bad_fraction", 0.0)),
            allow_empty=bool(options.get("allow_empty", False)),
            backfill_horizon_days=options.get("backfill_horizon_days"),
            refused=landing_refusals(frames),  # quarantined whatever the transform did with them
        )
    finally:
        release_staged()  # the checked copies of landed files Spark has read
    log.info(
        "%s %s version %d: %d row(s), %d quarantined%s",
        "committed" if result.committed else "unchanged content, no commit; still",
        result.ref.uri,
        result.ref.version,
        result.rows_written,
        result.rows_quarantined,
        f" ({result.reasons})" if result.reasons else "",
    )
    return result.to_dict()


def _run_score(
    spec: RunSpec, spark: Any, storage: StorageResolver, tracking: TrackingConfig | None
) -> dict[str, Any]:
    from airflow_provider_dltrain.inference.model import ScoringModel
    from airflow_provider_dltrain.inference.scoring import score_partition
    from airflow_provider_dltrain.lake.ref import DeltaRef

    p = spec.params
    model = p["model"]
    ref = DeltaRef.coerce(dict(p["input"]))
    if tracking is None:
        # A job loads the pinned version's artifacts directly (``load_uri``): it needs read access to
        # the artifact store, not the tracking server's credentials.
        uri = model.get("load_uri") or model["model_uri"]
        tracking = TrackingConfig(tracking_uri=p["tracking_uri"], registry_uri=p.get("registry_uri"))
    else:
        uri = model["model_uri"]
    chosen = ScoringModel(model.get("name"), model.get("version"), uri)
    written = score_partition(
        _session(spark, p.get("spark_conf")),
        chosen,
        ref,
        spec.table_uri,
        spec.partition,
        scoring=p["scoring"],
        tracking=tracking,
        input_filter=p.get("input_filter"),
        metadata=spec.metadata,
        storage_options=storage(spec.table_uri),
        input_storage_options=storage(ref.uri),
        allow_pickle=bool(p.get("allow_pickle", False)),
    )
    out = written.ref
    log.info("scored %s v%d into %s version %d", ref.uri, ref.version, out.uri, out.version)
    return {**written.to_dict(), "model_name": chosen.name, "model_version": chosen.version}


def spec_dict(value: Any) -> dict[str, Any]:
    """A dataclass or mapping as a plain dict (for ``write`` and ``scoring`` options)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return dict(value or {})
