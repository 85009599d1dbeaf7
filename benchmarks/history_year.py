"""A simulated year of nightly history, written by the provider's own decisions, stages and writers.

For each night D (one per day from ``start``):

- **ingest**: a landing folder ``landing/ds=D`` with the night's CSV; the ETL stage's re-run check
  (``etl.rerun_check.check_etl``) establishes its facts (the input listing, the transform's code
  hash, the parameters) and the partition is committed with them, the Airflow lineage keys and the
  quarantine count, by the lake writer the stages use (``lake.overwrite_partition``); its bad row
  goes to the quarantine table with the pairing the writer records;
- **pin**: the cut-off version of ``ds <= D`` (``lake.history.cutoff_commit``), as the sensor pins it;
- **training** (a year with an MLflow store, :func:`generate`'s ``tracking``): ``run_training`` trains
  the tiny model of :mod:`benchmarks.year_model` on the pin with ``ds <= D``, logs it, and
  ``register_and_promote`` registers it behind the gate (``val_loss``, lower is better) with cut-off
  D, exactly as ``TrainModelOperator`` and ``RegisterModelOperator`` do in the nightly DAG;
- **scoring**: the champion for D (``champion_as_of``) scores ``ds = D`` of the pin into the
  predictions partition through the scoring stage itself (``jobs.stages.run_stage``, Spark ``local``),
  after the re-run check that records its facts, as ``SparkBatchInferenceOperator`` does;
- **weekly maintenance** (Sundays): a Z-order compaction of the week's partitions and the provider's
  VACUUM, as a user schedules them;
- every commit file (and checkpoint) is aged to its simulated night, so delta-rs's checkpoints
  (every 100 commits) and its log clean-up run as they would have over the year.

A year generated this way is one the DAG in ``benchmarks/year_dags`` (the nightly retrain DAG's
shape on this model) backfills through Airflow: ``DLTRAIN_HOME`` holds the tables under ``lake/``
and MLflow in ``mlflow.db``, where the DAG finds them.

What it does not do, to fit a year in minutes on 2 cores: the ETL rows are computed with pyarrow
(:func:`transform`) instead of a Spark job; the commits, their recorded facts and digests, the
history index and the table properties are those of the real stage. Without an MLflow store (the
S3 year, which counts storage requests) it records a champion per week and scores with pyarrow.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

ROWS = 24  # per night: a bad row among them goes to quarantine
TRANSFORM = "benchmarks.history_year:transform"
INGEST, RETRAIN = "dltrain_ingest", "dltrain_retrain"


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def transform(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The night's rows: ``value`` parsed as a number (bad ones to quarantine), ``label`` kept."""
    values = [_number(v) for v in rows.column("value").to_pylist()]
    ok = pa.array([v is not None for v in values])
    good = pa.table(
        {"id": rows.column("id"), "value": pa.array(values, pa.float64()), "label": rows.column("label")}
    ).filter(ok)
    bad = pa.table(
        {
            "record": pa.array([str(i) for i in rows.column("id").to_pylist()]),
            "_error": pa.array(["value is not a number"] * rows.num_rows),
        }
    ).filter(pa.array([v is None for v in values]))
    return good, bad


@dataclass
class Year:
    """Where the simulated year lives and what each night pinned and used."""

    root: str  # the tables: a local folder or s3://bucket/prefix
    landing: str  # the landing zone: a local folder
    start: date
    days: int
    storage_options: dict[str, str] | None = None
    tracking: Any = None  # a TrackingConfig: train, gate and score nightly (else weekly stand-ins)
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)  # ds -> the cut-off DeltaRef dict
    champions: dict[str, dict[str, Any]] = field(default_factory=dict)  # ds -> model ref scored with
    promoted: list[str] = field(default_factory=list)  # the nights whose model the gate promoted
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent per phase of the nights
    seconds: float = 0.0

    def uri(self, name: str) -> str:
        return f"{self.root}/{name}" if "://" in self.root else os.path.join(self.root, name)

    @property
    def images(self) -> str:
        return self.uri("images")

    @property
    def quarantine(self) -> str:
        return self.uri("images_quarantine")

    @property
    def predictions(self) -> str:
        return self.uri("predictions")

    def ds(self, day: int) -> str:
        return (self.start + timedelta(days=day)).isoformat()

    def etl_spec(self, ds: str) -> Any:
        from airflow_provider_dltrain.engines.run_spec import RunSpec

        params = {
            "transform": TRANSFORM,
            "inputs": {"raw": os.path.join(self.landing, f"ds={ds}")},
            "transform_params": {},
            "write": {},
        }
        return RunSpec("etl", self.images, {"ds": ds}, params)

    def score_params(self, ds: str) -> dict[str, Any]:
        scoring: dict[str, Any] = {"features": ["value"], "output": "prediction"}
        if self.tracking is not None:  # the scoring stage's own spec, as the operator records it
            import dataclasses

            from airflow_provider_dltrain.inference.score_spec import ScoringSpec
            from benchmarks import year_model

            scoring = dataclasses.asdict(ScoringSpec.coerce(year_model.SCORING))
        return {
            "model": self.champions[ds],
            "input": self.pins[ds],
            "input_filter": [["ds", "=", ds]],
            "scoring": scoring,
            "allow_pickle": False,
        }


def _lineage(dag_id: str, task_id: str, ds: str) -> dict[str, str]:
    from airflow_provider_dltrain.lake.write import commit_metadata

    return commit_metadata(
        dag_id=dag_id,
        run_id=f"scheduled__{ds}T00:00:00+00:00",
        task_id=task_id,
        try_number=1,
        logical_date=ds,
    )


def _land(year: Year, day: int) -> None:
    folder = os.path.join(year.landing, f"ds={year.ds(day)}")
    os.makedirs(folder, exist_ok=True)
    values = [str(k + (day % 5) * 0.1) for k in range(ROWS)]  # a label the model can learn from value
    values[day % ROWS] = "n/a"
    rows = pa.table(
        {"id": list(range(ROWS)), "value": values, "label": [k * 10 // ROWS for k in range(ROWS)]}
    )
    pcsv.write_csv(rows, os.path.join(folder, "part-0.csv"))


def ingest(year: Year, day: int) -> Any:
    """The ETL stage's decision and commits for night ``day`` (nothing when unchanged)."""
    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.etl.rerun_check import check_etl
    from airflow_provider_dltrain.lake.pairing import META_ROWS_QUARANTINED, pairing_metadata

    ds, so = year.ds(day), year.storage_options
    check = check_etl(year.etl_spec(ds), lambda _uri: so)
    if check.skipped:
        return check
    raw = pcsv.read_csv(os.path.join(year.landing, f"ds={ds}", "part-0.csv"), convert_options=_as_text())
    good, bad = transform(raw)
    lineage = _lineage(INGEST, "ingest_images", ds)
    meta = {**lineage, **check.metadata(), META_ROWS_QUARANTINED: str(bad.num_rows)}
    ref = lake.overwrite_partition(year.images, good, {"ds": ds}, metadata=meta, storage_options=so)
    digest = lake.partition_digest(year.images, ref.version, {"ds": ds}, so)
    pair = pairing_metadata(year.images, {"ds": ds}, digest, so) or {}
    lake.overwrite_partition(
        year.quarantine, bad, {"ds": ds}, metadata={**lineage, **pair}, storage_options=so
    )
    return check


def _as_text() -> Any:
    return pcsv.ConvertOptions(column_types={"value": pa.string()})


def pin(year: Year, day: int) -> dict[str, Any]:
    from airflow_provider_dltrain.lake.history import cutoff_commit

    return cutoff_commit(year.images, {"ds": year.ds(day)}, storage_options=year.storage_options).to_dict()


def training_identity(year: Year, ref: dict[str, Any], ds: str) -> str | None:
    from airflow_provider_dltrain.lake.scan_plan import index_fingerprint

    found = index_fingerprint(ref, [["ds", "<=", ds]], year.storage_options)
    return found[0] if found else None


def score(year: Year, day: int) -> Any:
    """The scoring stage's decision and commit for night ``day`` (nothing when unchanged)."""
    import pyarrow.compute as pc

    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.etl.rerun_check import check_score
    from airflow_provider_dltrain.lake.reader import scan_version

    ds, so = year.ds(day), year.storage_options
    params = year.score_params(ds)
    check = check_score(year.predictions, {"ds": ds}, params, lambda _uri: so)
    if check.skipped:
        return check
    ref = lake.DeltaRef.coerce(params["input"])
    scan = scan_version(ref, so, [("ds", "=", ds)])
    import pyarrow.parquet as pq

    from airflow_provider_dltrain.lake.storage import filesystem

    fs, _ = filesystem(ref.uri, so)
    rows = pa.concat_tables([pq.read_table(f.uri.split("://", 1)[-1], filesystem=fs) for f in scan.files])
    model = params["model"]
    out = pa.table(
        {
            "id": rows.column("id"),
            "prediction": pc.multiply(rows.column("value"), float(model["version"])),
            "model_version": pa.array([model["version"]] * rows.num_rows),
            "input_version": pa.array([ref.version] * rows.num_rows, pa.int64()),
        }
    )
    meta = {
        **_lineage(RETRAIN, "score", ds),
        **check.metadata(),
        "dltrain.model_name": model["name"],
        "dltrain.model_version": model["version"],
        "dltrain.input_uri": ref.uri,
        "dltrain.input_version": str(ref.version),
    }
    lake.overwrite_partition(year.predictions, out, {"ds": ds}, metadata=meta, storage_options=so)
    return check


def maintain(year: Year, day: int) -> None:
    """Sunday's maintenance: compact the week's partitions, then VACUUM (the provider's, horizon-safe)."""
    from airflow_provider_dltrain import lake
    from airflow_provider_dltrain.lake import history_index
    from airflow_provider_dltrain.lake.maintenance import vacuum

    so = year.storage_options
    week = [("ds", ">=", year.ds(max(day - 6, 0)))]
    for uri in (year.images, year.predictions):
        lake.open_table(uri, None, so).optimize.z_order(["id"], partition_filters=week)
        history_index.update(uri, so)
        vacuum(uri, storage_options=so)


def _age(year: Year, day: int, seen: dict[str, set[str]]) -> None:
    """Set every new log file's time to night ``day`` (local tables: what the clean-up judges by)."""
    if "://" in year.root:
        return  # an object's time cannot be set: S3 tables age in real time only
    when = time.time() - (year.days - day) * 86400
    for uri in (year.images, year.quarantine, year.predictions):
        known = seen.setdefault(uri, set())
        for path in glob.glob(os.path.join(uri, "_delta_log", "*")):
            if path not in known:
                os.utime(path, (when, when))
                known.add(path)


def train_and_gate(year: Year, day: int) -> Any:
    """The nightly's training on the pin of ``ds <= D`` and its registration behind the gate."""
    from airflow_provider_dltrain.registry import GateSpec, register_and_promote
    from airflow_provider_dltrain.training.runner import run_training
    from benchmarks import year_model

    ds = year.ds(day)
    tags = {
        "dltrain.dag_id": year_model.DAG_ID,
        "dltrain.run_id": f"scheduled__{ds}T00:00:00+00:00",
        "dltrain.task_id": "train",
        "dltrain.logical_date": f"{ds}T00:00:00+00:00",
    }
    result = run_training(
        year_model.TRAIN_FN,
        year.pins[ds],
        year_model.HPARAMS,
        backend="local",
        data_filter=[["ds", "<=", ds]],
        tracking=year.tracking,
        cutoff=ds,
        experiment_name=year_model.MODEL,
        run_name=f"{year_model.DAG_ID}.train.{ds}",
        tags=tags,
        storage_options=year.storage_options,
    )
    decision = register_and_promote(
        year.tracking,
        model_name=year_model.MODEL,
        model_uri=result.model_uri,
        run_id=result.run_id,
        metrics=result.metrics,
        gate=GateSpec(metric=year_model.METRIC, mode="min"),
        data_cutoff=ds,
    )
    if decision.promoted:
        year.promoted.append(ds)
    return decision


def score_nightly(year: Year, day: int) -> Any:
    """The scoring stage for night ``day`` with the champion for it: the re-run check, then Spark."""
    import dataclasses

    from airflow_provider_dltrain.engines.run_spec import RunSpec
    from airflow_provider_dltrain.etl.rerun_check import check_score
    from airflow_provider_dltrain.inference import resolve_scoring_model
    from airflow_provider_dltrain.inference.score_spec import ScoringSpec
    from airflow_provider_dltrain.jobs.stages import run_stage
    from airflow_provider_dltrain.lake.partition import validate_partition
    from benchmarks import year_model

    ds, so = year.ds(day), year.storage_options
    spec = {"name": year_model.MODEL, "champion_as_of": ds}
    chosen = resolve_scoring_model(spec, year.tracking, None, field="model")
    year.champions[ds] = chosen.to_dict()
    scoring = ScoringSpec.coerce(year_model.SCORING)
    partition = validate_partition({"ds": ds}, formats=scoring.partition_formats)
    params = {
        "model": chosen.to_dict(),
        "input": year.pins[ds],
        "input_filter": [["ds", "=", ds]],
        "scoring": dataclasses.asdict(scoring),
        "allow_pickle": False,
    }
    check = check_score(year.predictions, partition, params, lambda _uri: so)
    if check.skipped:
        return check
    tracking = year.tracking
    run = RunSpec(
        "score",
        year.predictions,
        partition,
        {**params, "tracking_uri": tracking.tracking_uri, "registry_uri": tracking.registry_uri},
        metadata=_lineage(year_model.DAG_ID, "score", ds),
    )
    run_stage(check.apply(run), storage=lambda _uri: so, tracking=tracking)
    return check


def night(year: Year, day: int, seen: dict[str, set[str]]) -> None:
    ds = year.ds(day)
    with _phase(year, "ingest"):
        _land(year, day)
        ingest(year, day)
        year.pins[ds] = pin(year, day)
    if year.tracking is not None:
        with _phase(year, "train"):
            train_and_gate(year, day)
        with _phase(year, "score"):
            score_nightly(year, day)
    else:
        week = day // 7 + 1
        year.champions[ds] = {"name": "digits", "version": str(week), "model_uri": f"models:/digits/{week}"}
        with _phase(year, "score"):
            score(year, day)
    if day % 7 == 6:
        with _phase(year, "maintain"):
            maintain(year, day)
    _age(year, day, seen)


@contextlib.contextmanager
def _phase(year: Year, name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        year.phases[name] = year.phases.get(name, 0.0) + time.perf_counter() - started


def generate(
    root: str,
    landing: str,
    days: int = 365,
    *,
    start: date = date(2025, 12, 1),
    storage_options: dict[str, str] | None = None,
    tracking: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Year:
    """Write ``days`` nights of history: tables under ``root``, the landing zone under ``landing``.

    :param tracking: an MLflow ``TrackingConfig``: train, register and score with the champion
        nightly (see the module); without it, a weekly champion stands in and pyarrow scores.
    """
    year = Year(root, landing, start, days, storage_options, tracking)
    seen: dict[str, set[str]] = {}
    began = time.perf_counter()
    for day in range(days):
        night(year, day, seen)
        if progress and (day + 1) % 30 == 0:
            phases = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in year.phases.items())
            progress(f"night {day + 1}/{days} ({time.perf_counter() - began:.0f}s: {phases})")
    year.seconds = time.perf_counter() - began
    return year


def rerun(year: Year, day: int) -> dict[str, Any]:
    """The control plane of an unchanged re-run of night ``day``: every decision, nothing written.

    Returns what it decided; raises when any stage would compute (the re-run must be unchanged).
    """
    from airflow_provider_dltrain.etl.rerun_check import check_etl, check_score

    ds = year.ds(day)
    etl = check_etl(year.etl_spec(ds), lambda _uri: year.storage_options)
    pinned = pin(year, day)
    fingerprint = training_identity(year, pinned, ds)
    if year.tracking is not None:  # the champion for the date, as training's skip and scoring ask for it
        from airflow_provider_dltrain.registry import champion_as_of
        from benchmarks import year_model

        champion = champion_as_of(year.tracking, year_model.MODEL, ds)
        if champion is None or str(champion.version) != str(year.champions[ds]["version"]):
            raise RuntimeError(f"the champion for {ds} is {champion}, not {year.champions[ds]}")
    scored = check_score(
        year.predictions, {"ds": ds}, year.score_params(ds), lambda _uri: year.storage_options
    )
    if not (etl.skipped and scored.skipped) or pinned != year.pins[ds] or fingerprint is None:
        raise RuntimeError(
            f"the re-run of {ds} is not unchanged: etl {etl.reason}; score {scored.reason}; "
            f"pin {pinned} vs {year.pins[ds]}; fingerprint {fingerprint}"
        )
    return {"etl": etl.reason, "score": scored.reason, "pin": pinned, "fingerprint": fingerprint}
