"""``dltrain reap``: stop the cloud jobs and clusters whose Airflow task no longer runs, from a shell.

Whether a task runs comes from the Airflow metadata DB (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``) when
it is reachable and migrated. Without one, only age can tell a leak from a live job, so ``--older-than``
is required — or ``--all-finished-tasks`` to declare that no task runs at all.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

if TYPE_CHECKING:  # the reaper (boto3 and every engine) loads only when ``reap`` runs
    from airflow_provider_dltrain.engines.reaper import Clients, IsTaskRunning, Outcome


def add_reap_parser(sub: Any) -> None:
    """The ``reap`` subcommand and its options."""
    reap_cmd = sub.add_parser(
        "reap",
        help="terminate/stop/cancel dltrain cloud resources whose Airflow task is no longer running",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = reap_cmd.add_mutually_exclusive_group()
    where.add_argument("--aws-conn-id", default=None, help="Airflow aws connection to sweep with")
    where.add_argument("--endpoint-url", default=None, help="AWS endpoint (boto3's default credentials)")
    reap_cmd.add_argument("--region", default=None, help="AWS region (default: the connection's or boto3's)")
    reap_cmd.add_argument(
        "--older-than",
        type=_duration,
        default=None,
        help="only resources created longer ago than this, e.g. 90s, 30m, 2h, 1d",
    )
    reap_cmd.add_argument(
        "--kubeflow-namespace",
        default=None,
        help="also the running Kubeflow TrainJobs of backend='kubeflow' in this namespace (the kube-config's cluster)",
    )
    reap_cmd.add_argument("--dry-run", action="store_true", help="list what would be reaped, touch nothing")
    reap_cmd.add_argument(
        "--all-finished-tasks",
        action="store_true",
        help="treat every task as finished: do not consult the metadata DB (with --older-than, a sweep by age)",
    )
    reap_cmd.set_defaults(func=cmd_reap)


def _duration(text: str) -> timedelta:
    from airflow_provider_dltrain.engines.reaper import parse_duration

    try:
        return parse_duration(text)
    except InvalidSpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def cmd_reap(args: argparse.Namespace) -> int:
    from airflow_provider_dltrain.engines.reaper import reap

    if args.all_finished_tasks:
        lookup: IsTaskRunning = _nothing_runs
    else:
        found = metadata_db_lookup()
        if isinstance(found, str):
            if args.older_than is None:
                print(
                    f"error: no Airflow metadata DB to ask whether a task still runs ({found}). Set "
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN to the scheduler's DB, or pass --older-than "
                    "(e.g. 6h, longer than any task runs) to reap by age, or --all-finished-tasks",
                    file=sys.stderr,
                )
                return 2
            print(f"no Airflow metadata DB ({found}): reaping by age only", file=sys.stderr)
            lookup = _nothing_runs
        else:
            lookup = found
    outcomes = reap(
        cli_clients(args.aws_conn_id, args.endpoint_url, args.region),
        lookup,
        dry_run=args.dry_run,
        older_than=args.older_than,
        trainjobs=_trainjobs(args.kubeflow_namespace),
    )
    for outcome in outcomes:
        print(format_outcome(outcome))
    reaped = sum(o.reaped for o in outcomes)
    verb = "would reap" if args.dry_run else "reaped"
    print(f"{verb} {reaped} of {len(outcomes)} dltrain resource(s)", file=sys.stderr)
    return 1 if any(o.action == "failed" for o in outcomes) else 0


def _trainjobs(namespace: str | None) -> Any:
    if not namespace:
        return None
    from airflow_provider_dltrain.engines.kubeflow_reaper import trainer_client

    return trainer_client(namespace)


def _nothing_runs(_identity: Any) -> bool:
    return False


def format_outcome(outcome: Outcome) -> str:
    """``<kind> <id> dag=… run=… task=…[map] <state> <action> (<reason>)``."""
    res, who = outcome.resource, outcome.resource.identity
    task = who.task_id if who.map_index < 0 else f"{who.task_id}[{who.map_index}]"
    reason = f" ({outcome.reason})" if outcome.reason else ""
    return (
        f"{res.kind} {res.id} dag={who.dag_id} run={who.run_id} task={task} {res.state} "
        f"{outcome.action}{reason}"
    )


def cli_clients(aws_conn_id: str | None, endpoint_url: str | None, region: str | None) -> Clients:
    """boto3 clients from an Airflow ``aws`` connection, else from boto3's default credential chain."""
    if aws_conn_id:
        _import_airflow()
        from airflow_provider_dltrain.hooks.engines import EngineHook

        return EngineHook(aws_conn_id, region_name=region).client
    import boto3

    session = boto3.session.Session(region_name=region)
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            made[service] = session.client(service, endpoint_url=endpoint_url)
        return made[service]

    return client


def metadata_db_lookup() -> IsTaskRunning | str:
    """``is_task_running`` answered by the Airflow metadata DB, or why there is none to ask."""
    try:
        _import_airflow()
        from airflow import settings
        from sqlalchemy import inspect

        engine = settings.engine
        if engine is None:
            return "Airflow's ORM is not configured"
        if not inspect(engine).has_table("task_instance"):
            return f"{_redacted(engine)} has no task_instance table: not a migrated Airflow DB"
    except Exception as err:  # no Airflow, bad URL, unreachable server: all mean "no DB to ask"
        return f"{type(err).__name__}: {err}"
    from airflow_provider_dltrain.engines.reaper import running_by_task_states

    print(f"asking {_redacted(engine)} which tasks still run", file=sys.stderr)
    return running_by_task_states(db_task_states)


def _import_airflow() -> None:
    """Import Airflow with its log output sent to stderr: it logs to stdout, which holds our report."""
    with contextlib.redirect_stdout(sys.stderr):
        import airflow.settings  # noqa: F401


def _redacted(engine: Any) -> str:
    return str(engine.url.render_as_string(hide_password=True))


def db_task_states(dag_id: str, run_id: str) -> Mapping[str, Any]:
    """``{task_id or f"{task_id}_{map_index}": state}`` of one DAG run, read from the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
    )
    with create_session() as session:
        rows = session.execute(query).all()
    return {(task if index < 0 else f"{task}_{index}"): state for task, index, state in rows}
