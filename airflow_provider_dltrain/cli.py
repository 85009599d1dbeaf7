"""The ``dltrain`` command (also ``python -m airflow_provider_dltrain``)."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import date

from airflow_provider_dltrain.demo import paths


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a date like 2026-11-24, got {text!r}") from err


def cmd_demo_seed(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.demo.seed import seed

    for day in seed(paths.landing(), args.start, args.days):
        state = "seeded" if day.created else "already seeded"
        print(f"{day.ds}: {state} {day.images} images ({day.broken} deliberately broken) in {day.path}")
    return 0


def cmd_demo_run(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.demo.orchestrate import run_demo

    return run_demo(args.start, args.days)


def cmd_lineage(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.lineage import print_lineage

    return print_lineage(args.table_uri, args.version)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dltrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the embedded demo: data, DAG runs, summary").add_subparsers(
        dest="demo_command", required=True
    )
    seed = demo.add_parser("seed", help="seed the landing zone with daily folders of digit PNGs")
    seed.add_argument("--start", type=_date, required=True)
    seed.add_argument("--days", type=int, default=3)
    seed.set_defaults(func=cmd_demo_seed)
    run = demo.add_parser("run", help="seed if needed, then run the demo DAGs for consecutive dates")
    run.add_argument("--start", type=_date, required=True)
    run.add_argument("--days", type=int, default=3)
    run.set_defaults(func=cmd_demo_run)
    lineage = sub.add_parser("lineage", help="print the lineage of a prediction table version")
    lineage.add_argument("table_uri")
    lineage.add_argument("--version", type=int, default=None)
    lineage.set_defaults(func=cmd_lineage)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    args = build_parser().parse_args(argv)
    if getattr(args, "days", 1) < 1:
        print("--days must be at least 1", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
