"""``dltrain history``: a table's backfill horizon and history index, from the command line.

- ``dltrain history check URI``: the retention properties shorter than the horizon (exit 1 if any);
- ``dltrain history retain URI``: set them to the horizon (one metadata commit; no rewrite);
- ``dltrain history index URI``: build or catch up the history index (a table written by another
  tool, or by a release before the index): one pass over the retained log, then every pin costs
  the same few reads.

Storage credentials come from the environment, as for ``dltrain vacuum``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_check(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.lake.retention import check_table, horizon_days

    warnings = check_table(args.table_uri, None, args.horizon_days)
    for warning in warnings:
        print(warning)
    if not warnings:
        print(
            f"{args.table_uri} keeps its log and removed files for the {horizon_days(args.horizon_days)}-day horizon"
        )
    return 1 if warnings else 0


def cmd_retain(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.lake.retention import retain

    changed = retain(args.table_uri, None, args.horizon_days)
    print(json.dumps({"table": args.table_uri, "set": changed}))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.lake import history_index

    index = history_index.load(args.table_uri, persist=True)
    if index is None:
        print(f"no Delta table at {args.table_uri}")
        return 1
    summary: dict[str, Any] = {
        "table": index.uri,
        "indexed": index.indexed,
        "partitions": len(index.writes),
        "oldest_known_version": index.floor,
        "caught_up": index.stats.caught_up,
    }
    print(json.dumps(summary))
    return 0


def add_history_parser(sub: Any) -> None:
    history = sub.add_parser(
        "history", help="a Delta table's backfill horizon (retention) and history index"
    ).add_subparsers(dest="history_command", required=True)
    for name, func, text in (
        (
            "check",
            cmd_check,
            "list the retention properties shorter than the backfill horizon (exit 1 if any)",
        ),
        ("retain", cmd_retain, "set the table's log and removed-file retention to the backfill horizon"),
        ("index", cmd_index, "build or catch up the table's history index from its log"),
    ):
        command = history.add_parser(name, help=text)
        command.add_argument("table_uri")
        if name != "index":
            command.add_argument(
                "--horizon-days",
                type=int,
                default=None,
                help="the horizon (default DLTRAIN_BACKFILL_HORIZON_DAYS or 400)",
            )
        command.set_defaults(func=func)
