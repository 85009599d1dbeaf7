"""The ``dltrain`` command (also ``python -m airflow_provider_dltrain``)."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import date

from airflow_provider_dltrain.demo import paths
from airflow_provider_dltrain.demo.seed import PER_DAY


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a date like 2026-11-24, got {text!r}") from err


def cmd_demo_seed(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.demo.seed import seed

    for day in seed(paths.landing(), args.start, args.days, per_day=args.per_day):
        state = "seeded" if day.created else "already seeded"
        print(f"{day.ds}: {state} {day.images} images ({day.broken} deliberately broken) in {day.path}")
    return 0


def cmd_demo_run(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.demo.orchestrate import run_demo

    return run_demo(args.start, args.days)


def cmd_lineage(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.commands.champion import cli_tracking
    from airflow_provider_dltrain.commands.connections import cli_storage_options, storage_failure
    from airflow_provider_dltrain.lake.storage import is_remote
    from airflow_provider_dltrain.lineage import format_lineage, lineage

    options = cli_storage_options(args.aws_conn_id, args.storage_option)
    tracking = cli_tracking(args.tracking_uri, options)
    try:
        chain = lineage(args.table_uri, args.version, tracking=tracking, storage_options=options)
    except Exception as err:
        if not (is_remote(args.table_uri) and _storage_error(err)):
            raise
        raise storage_failure(args.table_uri, options, err) from err
    print(format_lineage(chain))
    return 0


def _storage_error(err: BaseException) -> bool:
    """An error of the storage layer (pyarrow's S3 filesystem, delta-rs), not of this provider."""
    from airflow_provider_dltrain.exceptions import DltrainError, StorageReadError

    if isinstance(err, StorageReadError):  # a log file the storage did not hand over
        return True
    module = type(err).__module__ or ""
    return not isinstance(err, DltrainError) and (
        isinstance(err, OSError) or module.startswith(("pyarrow", "deltalake", "_deltalake"))
    )


def cmd_champion(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.commands.champion import champion_report, cli_tracking, format_champion
    from airflow_provider_dltrain.commands.connections import cli_storage_options

    tracking = cli_tracking(args.tracking_uri, cli_storage_options(args.aws_conn_id, args.storage_option))
    report = champion_report(tracking, args.model, args.as_of, args.alias)
    print(format_champion(report))
    return 0


def cmd_backfill_report(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.backfill_report import backfill_report, format_report
    from airflow_provider_dltrain.commands.champion import NoStoreError, cli_tracking
    from airflow_provider_dltrain.commands.connections import cli_storage_options

    if args.end < args.start:
        print(f"END {args.end} is before START {args.start}", file=sys.stderr)
        return 2
    if args.plan:
        return _print_plan(args)
    options = cli_storage_options(args.aws_conn_id, args.storage_option)
    try:
        tracking = cli_tracking(args.tracking_uri, options)
    except NoStoreError:
        if args.tracking_uri:
            raise
        tracking = None  # a DAG that trains nothing: the report reads the tables only
    reports = backfill_report(args.dag_id, args.start, args.end, tracking, storage_options=options)
    if args.json:
        import json

        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        print(format_report(reports))
    return 0


def _print_plan(args: argparse.Namespace) -> int:
    """``backfill-report --plan``: what a backfill of the range would do, decided as its tasks decide."""
    import contextlib
    import json

    from airflow_provider_dltrain.backfill_plan import format_plan, plan_backfill
    from airflow_provider_dltrain.backfill_runs import run_outcomes
    from airflow_provider_dltrain.backfill_views import load_dag, scrubbed

    try:
        conf = json.loads(args.conf) if args.conf else None
    except ValueError as err:
        print(f"--conf is not JSON: {err}", file=sys.stderr)
        return 2
    runs = run_outcomes(args.dag_id, args.start, args.end)
    with contextlib.redirect_stdout(sys.stderr):  # the tasks' own log lines stay out of the plan (--json)
        plan = plan_backfill(load_dag(args.dag_id), args.start, args.end, runs=runs, conf=conf)
    print(json.dumps(scrubbed(plan.to_dict()), indent=2) if args.json else format_plan(plan))
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.lake.maintenance import vacuum

    result = vacuum(
        args.table_uri, retention_hours=args.retention_hours, dry_run=args.dry_run, force=args.force
    )
    for path in result.files:
        print(path)
    verb = "would remove" if result.dry_run else "removed"
    retention = "the table's retention" if result.retention_hours is None else f"{result.retention_hours}h"
    print(f"{verb} {len(result.files)} unreferenced file(s) older than {retention} from {result.uri}")
    return 0


def cmd_fake_aws(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.testing.fake_aws import serve

    return serve(args)


def _tracking_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store (default: the mlflow_default connection, else $MLFLOW_TRACKING_URI, "
        "else $DLTRAIN_HOME/mlflow.db); never created by this command",
    )
    parser.add_argument(
        "--aws-conn-id",
        default=None,
        help="Airflow aws connection for s3:// tables (and MLflow's S3 artifacts), read from "
        "AIRFLOW_CONN_<ID> or the configured secrets backend; no running Airflow needed",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an S3 setting, e.g. AWS_REGION=eu-west-1, AWS_ENDPOINT_URL=http://localhost:9000, "
        "AWS_ACCESS_KEY_ID=...; repeatable; applied over the connection's",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dltrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the embedded demo: data, DAG runs, summary").add_subparsers(
        dest="demo_command", required=True
    )
    seed = demo.add_parser("seed", help="seed the landing zone with daily folders of digit PNGs")
    seed.add_argument("--start", type=_date, required=True)
    seed.add_argument("--days", type=int, default=3)
    seed.add_argument(
        "--per-day", type=_positive, default=PER_DAY, help=f"images per day (default {PER_DAY})"
    )
    seed.set_defaults(func=cmd_demo_seed)
    run = demo.add_parser("run", help="seed if needed, then run the demo DAGs for consecutive dates")
    run.add_argument("--start", type=_date, required=True)
    run.add_argument("--days", type=int, default=3)
    run.set_defaults(func=cmd_demo_run)
    lineage = sub.add_parser("lineage", help="print the lineage of a prediction table version")
    lineage.add_argument("table_uri")
    lineage.add_argument("--version", type=int, default=None)
    _tracking_option(lineage)
    lineage.set_defaults(func=cmd_lineage)
    champion = sub.add_parser(
        "champion", help="champion history of a registered model, and the champion for a date"
    )
    champion.add_argument("model", help="registered model name")
    champion.add_argument(
        "--as-of", type=lambda t: _date(t).isoformat(), default=None, help="a data cut-off date"
    )
    champion.add_argument("--alias", default="champion")
    _tracking_option(champion)
    champion.set_defaults(func=cmd_champion)
    report = sub.add_parser(
        "backfill-report",
        help="per date: did the newest run reproduce the nightly answer, or what changed",
        description="For each date from START to END, the newest run of DAG_ID whose data interval starts "
        "on that date: reproduced (nothing committed, trained or submitted), or changed and what changed "
        "(partition, content, model, code, hyper-parameters). Reads Airflow's metadata database (run it "
        "where `airflow` runs: same AIRFLOW_HOME / sql_alchemy_conn), the Delta commit log and MLflow.",
    )
    report.add_argument("dag_id")
    report.add_argument("start", type=_date)
    report.add_argument("end", type=_date)
    report.add_argument("--json", action="store_true", help="one JSON object per date")
    report.add_argument(
        "--plan",
        action="store_true",
        help="before a backfill: per date, will it skip or recompute (and why), and what it will cost; "
        "each task decides with its own connections, as the run would",
    )
    report.add_argument(
        "--conf",
        help="with --plan: the backfill's run configuration as JSON (the DAG's params it overrides), e.g. '{\"hparams\": {\"lr\": 0.01}}'",
    )
    _tracking_option(report)
    report.set_defaults(func=cmd_backfill_report)
    vacuum = sub.add_parser(
        "vacuum",
        help="remove files no version of a Delta table references (removed ones, and those of killed writes)",
    )
    vacuum.add_argument("table_uri")
    vacuum.add_argument(
        "--retention-hours",
        type=int,
        default=None,
        help="only files older than this (default: the table's delta.deletedFileRetentionDuration; files "
        "replaced by a commit also stay for the backfill horizon, DLTRAIN_BACKFILL_HORIZON_DAYS)",
    )
    vacuum.add_argument("--dry-run", action="store_true", help="list the files, delete nothing")
    vacuum.add_argument(
        "--force",
        action="store_true",
        help="accept --retention-hours below the table's retention (only when no write is running)",
    )
    vacuum.set_defaults(func=cmd_vacuum)
    from airflow_provider_dltrain.commands.history import add_history_parser
    from airflow_provider_dltrain.commands.reap import add_reap_parser

    add_history_parser(sub)
    add_reap_parser(sub)
    # stdlib only: moto is imported when the command runs
    from airflow_provider_dltrain.testing.fake_aws import add_arguments as add_fake_aws_arguments

    fake_aws = sub.add_parser(
        "fake-aws",
        help="a fake AWS on 127.0.0.1 that runs Glue, EMR, EMR Serverless, SageMaker and EC2 jobs locally "
        "(test DAGs offline; needs the [testing] extra)",
        description="Serve a fake AWS (moto) whose jobs run as local processes, create the buckets and "
        "EMR Serverless applications given, write the Airflow 'aws' connection and the AWS_* exports, "
        "secret included, to --env-file (mode 0600), print them without the secret, then "
        "'READY <endpoint>'; Ctrl-C or SIGTERM stops it and every job it started. It answers only "
        "requests SigV4-signed with its credentials: fresh random keys at every start, or yours from "
        "DLTRAIN_FAKE_AWS_ACCESS_KEY_ID and DLTRAIN_FAKE_AWS_SECRET_ACCESS_KEY (the well-known 'testing' "
        "keys only with --insecure-well-known-keys, on loopback); anything else gets 403 and runs nothing.",
    )
    add_fake_aws_arguments(fake_aws)
    fake_aws.set_defaults(func=cmd_fake_aws)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    args = build_parser().parse_args(argv)
    if getattr(args, "days", 1) < 1:
        print("--days must be at least 1", file=sys.stderr)
        return 2
    from airflow_provider_dltrain.exceptions import DltrainUserError, StorageReadError

    try:
        return int(args.func(args))
    except (DltrainUserError, StorageReadError) as err:  # said in full: no traceback to read through
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
