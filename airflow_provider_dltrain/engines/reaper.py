"""Find the cloud resources our engines left alive, and stop those whose Airflow task no longer runs.

A worker that dies (OOM, lost node, ``kill -9``) never runs ``on_kill`` or ``teardown``, so a transient
EMR cluster, a Glue job run, an EMR Serverless job run or the instances of an EC2 training cluster
can outlive its task and keep billing. Every
such resource carries the identity of its task (tags, or Glue run arguments); :func:`reap` asks a
caller-supplied ``is_task_running`` whether that task still runs and stops the rest. Resources without
our tags are never touched. No Airflow here: the operator asks the Task SDK, the CLI the metadata DB.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_dltrain.engines import ec2, emr, emr_serverless
from airflow_provider_dltrain.engines.spec import RunIdentity
from airflow_provider_dltrain.exceptions import InvalidSpecError

log = logging.getLogger(__name__)

EMR_CLUSTER, GLUE_JOB_RUN, EMR_SERVERLESS_JOB_RUN = "emr_cluster", "glue_job_run", "emr_serverless_job_run"
EC2_INSTANCE = "ec2_instance"
GLUE_LIVE = ["STARTING", "RUNNING", "WAITING"]
# Not CANCELLING: a cancel is already under way.
EMR_SERVERLESS_LIVE = [s for s in emr_serverless.ACTIVE if s != "CANCELLING"]
# Airflow task-instance states in which a task may still own (or re-attach to) its cloud job.
LIVE_TASK_STATES = frozenset(
    {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
)
VERBS = {
    EMR_CLUSTER: "terminate",
    GLUE_JOB_RUN: "stop",
    EMR_SERVERLESS_JOB_RUN: "cancel",
    EC2_INSTANCE: "terminate",
}
DONE = {"terminate": "terminated", "stop": "stopped", "cancel": "cancelled"}

Clients = Callable[[str], Any]
IsTaskRunning = Callable[[RunIdentity], bool]


@dataclass(frozen=True)
class Resource:
    """One live cloud resource an engine created, and the task it belongs to.

    ``id`` is the cluster id, ``<job name>/<job run id>`` or ``<application id>/<job run id>``.
    """

    kind: str
    id: str
    identity: RunIdentity
    state: str
    created: datetime | None = None
    ids: dict[str, str] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        who = self.identity
        task = who.task_id if who.map_index < 0 else f"{who.task_id}[{who.map_index}]"
        return f"{self.kind} {self.id} ({who.dag_id}/{who.run_id}/{task}, {self.state})"


@dataclass(frozen=True)
class Outcome:
    """What :func:`reap` did with one resource.

    ``action``: ``terminated`` / ``stopped`` / ``cancelled``; ``would terminate`` (…) on a dry run;
    ``kept`` (``reason`` says why) or ``failed`` (``reason`` is the service's error).
    """

    resource: Resource
    action: str
    reason: str = ""

    @property
    def reaped(self) -> bool:
        return self.action in DONE.values() or self.action.startswith("would ")

    def to_dict(self) -> dict[str, Any]:
        res, who = self.resource, self.resource.identity
        return {
            "kind": res.kind,
            "id": res.id,
            "dag_id": who.dag_id,
            "run_id": who.run_id,
            "task_id": who.task_id,
            "map_index": who.map_index,
            "state": res.state,
            "created": res.created.isoformat() if res.created else None,
            "action": self.action,
            "reason": self.reason,
        }


def find_resources(clients: Clients) -> list[Resource]:
    """Every live resource carrying our identity tags: EMR clusters, Glue and EMR Serverless job runs,
    EC2 instances."""
    return [
        *_emr_clusters(clients("emr")),
        *_glue_runs(clients),
        *_serverless_runs(clients("emr-serverless")),
        *_ec2_instances(clients("ec2")),
    ]


def _ec2_instances(client: Any) -> Iterator[Resource]:
    filters = [
        {"Name": "tag-key", "Values": ["dltrain:run_id"]},
        {"Name": "instance-state-name", "Values": ec2.LIVE},
    ]
    pages = client.get_paginator("describe_instances").paginate(Filters=filters)
    for instance in (
        i for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])
    ):
        identity = RunIdentity.from_tags({t["Key"]: t["Value"] for t in instance.get("Tags", [])})
        if identity is None:
            continue
        yield Resource(
            EC2_INSTANCE,
            instance["InstanceId"],
            identity,
            instance["State"]["Name"],
            instance.get("LaunchTime"),
            {"instance_id": instance["InstanceId"]},
        )


def _emr_clusters(client: Any) -> Iterator[Resource]:
    pages = client.get_paginator("list_clusters").paginate(ClusterStates=emr.ACTIVE_CLUSTER)
    for summary in (c for page in pages for c in page.get("Clusters", [])):
        cluster = client.describe_cluster(ClusterId=summary["Id"])["Cluster"]
        identity = RunIdentity.from_tags({t["Key"]: t["Value"] for t in cluster.get("Tags", [])})
        if identity is None:
            continue
        status = cluster["Status"]
        yield Resource(
            EMR_CLUSTER,
            cluster["Id"],
            identity,
            status["State"],
            status.get("Timeline", {}).get("CreationDateTime"),
            {"cluster_id": cluster["Id"]},
        )


def _glue_runs(clients: Clients) -> Iterator[Resource]:
    glue = clients("glue")
    # ListJobs filters by tag in one call (moto too); GetJobs would need a GetTags per job.
    pages = glue.get_paginator("list_jobs").paginate(Tags={"dltrain:managed": "true"})
    job_tags: _GlueJobTags | None = None
    for name in (n for page in pages for n in page.get("JobNames", [])):
        try:
            runs_pages = glue.get_paginator("get_job_runs").paginate(JobName=name)
            runs = [r for page in runs_pages for r in page.get("JobRuns", [])]
        except glue.exceptions.EntityNotFoundException:
            continue  # deleted since it was listed
        for run in runs:
            args = run.get("Arguments") or {}
            if run.get("JobRunState") not in GLUE_LIVE or "--dltrain-run-id" not in args:
                continue
            if "--dltrain-task-id" not in args:  # a run started before runs carried the whole identity
                job_tags = job_tags or _GlueJobTags(clients)
                args = {**job_tags.arguments(name), **args}
            yield Resource(
                GLUE_JOB_RUN,
                f"{name}/{run['Id']}",
                _glue_identity(args),
                run["JobRunState"],
                run.get("StartedOn"),
                {"job_name": name, "job_run_id": run["Id"]},
            )


def _glue_identity(args: Mapping[str, str]) -> RunIdentity:
    return RunIdentity(
        dag_id=args.get("--dltrain-dag-id", "adhoc"),
        run_id=args["--dltrain-run-id"],
        task_id=args.get("--dltrain-task-id", "adhoc"),
        map_index=int(args.get("--dltrain-map-index", "-1")),
    )


class _GlueJobTags:
    """A job's identity tags as run arguments (``arn:aws:glue:<region>:<account>:job/<name>``)."""

    def __init__(self, clients: Clients) -> None:
        self.glue = clients("glue")
        account = clients("sts").get_caller_identity()["Account"]
        self.prefix = f"arn:aws:glue:{self.glue.meta.region_name}:{account}:job/"

    def arguments(self, job_name: str) -> dict[str, str]:
        tags = self.glue.get_tags(ResourceArn=self.prefix + job_name).get("Tags", {})
        names = {"dltrain:dag_id": "--dltrain-dag-id", "dltrain:task_id": "--dltrain-task-id"}
        names["dltrain:map_index"] = "--dltrain-map-index"
        return {arg: tags[tag] for tag, arg in names.items() if tag in tags}


def _serverless_runs(client: Any) -> Iterator[Resource]:
    for page in client.get_paginator("list_applications").paginate():
        for app in page.get("applications", []):
            if app.get("state") == "TERMINATED":
                continue
            try:
                runs_pages = client.get_paginator("list_job_runs").paginate(
                    applicationId=app["id"], states=EMR_SERVERLESS_LIVE
                )
                summaries = [r for p in runs_pages for r in p.get("jobRuns", [])]
            except client.exceptions.ResourceNotFoundException:
                continue  # deleted since it was listed (moto: also an application that never ran)
            for summary in summaries:
                run = client.get_job_run(applicationId=app["id"], jobRunId=summary["id"])["jobRun"]
                identity = RunIdentity.from_tags(run.get("tags") or {})
                if identity is None:
                    continue
                yield Resource(
                    EMR_SERVERLESS_JOB_RUN,
                    f"{app['id']}/{run['jobRunId']}",
                    identity,
                    run["state"],
                    run.get("createdAt"),
                    {"application_id": app["id"], "job_run_id": run["jobRunId"]},
                )


def reap(
    clients: Clients,
    is_task_running: IsTaskRunning,
    *,
    dry_run: bool = False,
    older_than: timedelta | None = None,
) -> list[Outcome]:
    """Stop every resource of ours whose task no longer runs (and, if given, older than ``older_than``).

    Every task is looked up before anything is stopped, so a failing lookup stops nothing. One
    resource that cannot be stopped is reported as ``failed`` and does not stop the others.
    """
    now = datetime.now(timezone.utc)
    decided = [(res, _keep_reason(res, is_task_running, older_than, now)) for res in find_resources(clients)]
    outcomes = []
    for res, keep in decided:
        if keep:
            log.info("kept %s: %s", res.describe(), keep)
            outcomes.append(Outcome(res, "kept", keep))
            continue
        verb = VERBS[res.kind]
        if dry_run:
            log.info("dry run: would %s %s", verb, res.describe())
            outcomes.append(Outcome(res, f"would {verb}", "task not running"))
            continue
        try:
            _stop(clients, res)
        except Exception as err:  # one protected cluster must not leave the others running
            log.warning("could not %s %s: %s", verb, res.describe(), err)
            outcomes.append(Outcome(res, "failed", f"{type(err).__name__}: {err}"))
            continue
        log.info("%s %s: its task is not running", DONE[verb], res.describe())
        outcomes.append(Outcome(res, DONE[verb], "task not running"))
    return outcomes


def _keep_reason(
    res: Resource, is_task_running: IsTaskRunning, older_than: timedelta | None, now: datetime
) -> str:
    if older_than is not None and res.created is not None and now - _aware(res.created) < older_than:
        return f"younger than {older_than}"
    if is_task_running(res.identity):
        return "task running"
    return ""


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _stop(clients: Clients, res: Resource) -> None:
    if res.kind == EMR_CLUSTER:
        clients("emr").terminate_job_flows(JobFlowIds=[res.ids["cluster_id"]])
    elif res.kind == EC2_INSTANCE:
        clients("ec2").terminate_instances(InstanceIds=[res.ids["instance_id"]])
    elif res.kind == GLUE_JOB_RUN:
        out = clients("glue").batch_stop_job_run(
            JobName=res.ids["job_name"], JobRunIds=[res.ids["job_run_id"]]
        )
        errors = [e.get("ErrorDetail", {}).get("ErrorMessage", "") for e in out.get("Errors", [])]
        if errors:
            raise RuntimeError("; ".join(errors))
    else:
        clients("emr-serverless").cancel_job_run(
            applicationId=res.ids["application_id"], jobRunId=res.ids["job_run_id"]
        )


def running_by_task_states(fetch: Callable[[str, str], Mapping[str, Any]]) -> IsTaskRunning:
    """``is_task_running`` from ``fetch(dag_id, run_id)``: one lookup per DAG run, cached.

    ``fetch`` returns ``{task_id: state}``, mapped task instances as ``{f"{task_id}_{map_index}": state}``
    (the shape of Airflow's ``get_task_states``). A task it does not list is not running.
    """
    cache: dict[tuple[str, str], Mapping[str, Any]] = {}

    def is_task_running(identity: RunIdentity) -> bool:
        key = (identity.dag_id, identity.run_id)
        if key not in cache:
            cache[key] = fetch(*key)
        name = identity.task_id if identity.map_index < 0 else f"{identity.task_id}_{identity.map_index}"
        state = cache[key].get(name)
        return str(getattr(state, "value", state) or "").lower() in LIVE_TASK_STATES

    return is_task_running


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` (a bare number is seconds)."""
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", cleaned):
        return timedelta(seconds=float(cleaned))
    parts = _DURATION.findall(cleaned)
    if not cleaned or "".join(n + u for n, u in parts) != cleaned:
        raise InvalidSpecError(f"duration {text!r} is not like 90s, 30m, 2h, 1d or 1h30m")
    return sum((timedelta(**{_UNITS[unit]: float(n)}) for n, unit in parts), timedelta())
