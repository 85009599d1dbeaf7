"""The job entry point: read a :class:`RunSpec`, run the stage, write the result JSON.

A training job's spec (``"kind": "train"``) goes to :mod:`~.train_entry` instead, once per rank.

``python -m airflow_provider_dltrain.jobs.entry --spec s3://…/spec.json`` (or the uploaded
``job_script.py`` with the same arguments). Unknown arguments are ignored: Glue adds its own
(``--JOB_ID``, ``--JOB_RUN_ID``, ``--TempDir``, …). The exit status is the outcome: 0 when the stage
committed (or found its content already there), 1 otherwise; the result file says why.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from airflow_provider_dltrain.engines.objects import read_object, write_object
from airflow_provider_dltrain.engines.run_spec import RunSpec
from airflow_provider_dltrain.exceptions import DltrainUserError

log = logging.getLogger("airflow_provider_dltrain.jobs.entry")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dltrain-job", description=__doc__)
    parser.add_argument("--spec", required=True, help="URI of the run spec JSON (s3:// or a path)")
    parser.add_argument("--code", action="append", default=[], help="code bundle (handled by job_script)")
    return parser


def read_uri(uri: str) -> bytes:
    data = read_object(uri)
    if data is None:
        raise FileNotFoundError(f"nothing at {uri}")
    return data


def write_uri(uri: str, data: bytes) -> None:
    write_object(uri, data)


def job_session(conf: dict[str, str] | None, code_paths: Sequence[str]) -> Any:
    """The job's Spark session, with the code bundle shipped to every executor."""
    from airflow_provider_dltrain.etl.spark import spark_session

    spark = spark_session(app_name="dltrain-job", conf=conf)
    for path in code_paths:
        # Executors import the provider (scoring UDF, file writer) and the transform module from it.
        spark.sparkContext.addPyFile(path)
    return spark


def main(argv: Sequence[str] | None = None, *, code_paths: Sequence[str] = ()) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args, ignored = _parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if ignored:
        log.info("ignoring arguments added by the service: %s", " ".join(ignored))
    raw = read_uri(args.spec)
    from airflow_provider_dltrain.engines.train_spec import TrainJobSpec, is_train_spec

    if is_train_spec(raw):
        if os.environ.get("DLTRAIN_ENGINE") == "ray":  # the driver of a Ray job: it starts the ranks
            from airflow_provider_dltrain.jobs import ray_driver

            return ray_driver.run(TrainJobSpec.from_json(raw))
        from airflow_provider_dltrain.jobs import train_entry  # one rank (SageMaker, EC2): no Spark

        return train_entry.run(TrainJobSpec.from_json(raw))
    spec = RunSpec.from_json(raw)
    log.info(
        "%s stage for %s %s (dag %s, run %s, task %s, try %s)",
        spec.stage,
        spec.table_uri,
        spec.partition,
        spec.identity.dag_id,
        spec.identity.run_id,
        spec.identity.task_id,
        spec.identity.try_number,
    )
    try:
        from airflow_provider_dltrain.jobs.stages import run_stage

        spark = job_session(spec.params.get("spark_conf"), code_paths)
        result: dict[str, Any] = run_stage(spec, spark=spark)
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
        outcome = {"error": message, "user_error": isinstance(err, DltrainUserError)}
        outcome["traceback"] = traceback.format_exc()[-4000:]
        if spec.result_uri:
            write_uri(spec.result_uri, json.dumps(outcome).encode())
        # Last line of stderr: what Glue's ErrorMessage / EMR's failure details show.
        print(f"dltrain job failed: {message}", file=sys.stderr, flush=True)
        return 1
    if spec.result_uri:
        write_uri(spec.result_uri, json.dumps(result, sort_keys=True).encode())
    log.info("result: %s", json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
