"""Run a stage's :class:`RunSpec` where ``engine=`` says: in this process, or as a cloud job.

Shared by the ETL, scoring and remote training operators (composition of one helper, not an operator
per engine): submit (or re-attach to the job an earlier try of this task left running), wait or
defer, return the job's result, cancel on kill, and always tear down what the run created. The
lifecycle itself is ``engines.lifecycle``, which ``run_training`` uses too; only deferral is here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

from airflow_provider_dltrain.engines import LOCAL

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dltrain.engines import Engine, JobHandle, JobStatus, RunIdentity, RunSpec

log = logging.getLogger(__name__)
XCOM_JOB = "dltrain_job"


def identity_from(context: Context) -> RunIdentity:
    from airflow_provider_dltrain.engines import RunIdentity
    from airflow_provider_dltrain.operators.task_context import run_info

    info = run_info(context)
    ti = context.get("ti")
    map_index = getattr(ti, "map_index", -1)
    return RunIdentity(
        dag_id=info["dag_id"] or "adhoc",
        run_id=info["run_id"] or "adhoc",
        task_id=info["task_id"] or "adhoc",
        map_index=int(map_index) if isinstance(map_index, int) else -1,
        try_number=int(info["try_number"] or 1),
        logical_date=info["logical_date"],
    )


def checked_options(engine: Any, options: Any, *, what: str = "engine") -> Any:
    """``options`` (a dict, an engine's options object, or a Jinja string) as the operator keeps them:
    the engine's options object, checked now while the DAG file is parsed; a dict where a value is
    templated (checked when rendered), a Jinja string as it is."""
    from airflow_provider_dltrain.engines import check_engine_options

    return check_engine_options(engine, options, what=what)


class EngineJobLink(BaseOperatorLink):
    """The service console page of the job this task ran (Glue run, EMR cluster, EMR Serverless run)."""

    name = "Job console"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.providers.common.compat.sdk import XCom

        from airflow_provider_dltrain.engines import TRAINING_ENGINE_NAMES

        # A task that runs in-process never records a job: asking would log "XCom not found" as an
        # error in every such task's log. (A serialized operator may lack these: then ask.)
        engine, backend = getattr(operator, "engine", None), getattr(operator, "backend", None)
        if engine == LOCAL or (isinstance(backend, str) and backend and backend not in TRAINING_ENGINE_NAMES):
            return ""
        job = XCom.get_value(key=XCOM_JOB, ti_key=ti_key)
        return str((job or {}).get("console_url") or "")


class EngineRun:
    """The engine part of an operator: where it runs (``engine`` and ``engine_options`` of a stage, see
    :meth:`where`), ``aws_conn_id``, ``deferrable``."""

    engine: str
    engine_options: Any
    aws_conn_id: str | None
    deferrable: bool
    poll_interval: float
    log: Any
    _job: tuple[Engine, JobHandle] | None = None
    _kill_requested: bool = False  # on_kill came before the job was known (while it was submitted)

    def where(self) -> tuple[str, Any]:
        """The place's name and options as the user wrote them (``backend=`` for training)."""
        return str(self.engine), self.engine_options

    def _engine(self) -> Engine:
        from airflow_provider_dltrain.hooks.engines import EngineHook

        return EngineHook(self.aws_conn_id).get_engine(*self.where())

    def run_stage_on_engine(
        self, context: Context, spec: RunSpec, local: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """``local()`` for the local engine; otherwise the job's result (deferring when asked)."""
        from airflow_provider_dltrain.engines import check_engine_name

        check_engine_name(self.engine)
        if self.engine == LOCAL:
            return local()
        return self.run_on_engine(context, self._engine(), spec.identity, lambda: spec)

    def run_on_engine(
        self,
        context: Context,
        engine: Engine,
        identity: RunIdentity,
        make_spec: Callable[[], Any],
    ) -> dict[str, Any]:
        """Re-attach to this task's running job or stage and submit ``make_spec()``; then wait or defer.

        ``make_spec`` is called only when nothing is running for ``identity`` (a training launcher
        opens its MLflow run there: a re-attaching retry must not open a second one).
        """
        from airflow_provider_dltrain.engines.lifecycle import start_job

        handle, _ = start_job(engine, identity, make_spec, logger=self.log)
        if handle.console_url:
            self.log.info("console: %s", handle.console_url)
        context["ti"].xcom_push(key=XCOM_JOB, value=handle.to_dict())
        self._job = (engine, handle)
        if self._kill_requested:
            # on_kill ran while the job was being submitted: it could not stop what it did not know yet
            self.log.warning(
                "the task was killed while %s job %s was submitted: stopping it", engine.name, handle.ids
            )
            self.kill_job()
            raise RuntimeError(
                f"the task was killed while {engine.name} job {handle.ids} was submitted; it was stopped"
            )
        self.job_started(context, engine, handle)
        if self.deferrable:
            from airflow_provider_dltrain.engines.options import options_dict
            from airflow_provider_dltrain.triggers.engines import EngineJobTrigger

            trigger = EngineJobTrigger(
                engine=engine.name,
                handle=handle.to_dict(),
                engine_options=options_dict(self.where()[1]),
                aws_conn_id=self.aws_conn_id,
                poll_interval=self.poll_interval,
                **self.trigger_extras(),
            )
            self.defer(trigger=trigger, method_name="execute_complete")  # type: ignore[attr-defined]
        return self._finish(engine, handle, None)

    def job_started(self, context: Context, engine: Engine, handle: JobHandle) -> None:
        """Called once the job is known (submitted or re-attached), before waiting or deferring."""

    def trigger_extras(self) -> dict[str, Any]:
        """Further :class:`EngineJobTrigger` kwargs (never secrets); subclasses add theirs."""
        return {}

    def engine_outcome(self, engine: Engine, handle: JobHandle, status: JobStatus) -> dict[str, Any]:
        """What the task returns for a terminal job (raises for a failed one); subclasses refine it."""
        from airflow_provider_dltrain.engines import outcome

        return outcome(engine, handle, status)

    def _finish(self, engine: Engine, handle: JobHandle, event: dict[str, Any] | None) -> dict[str, Any]:
        from airflow_provider_dltrain.engines import JobStatus
        from airflow_provider_dltrain.engines.lifecycle import finish

        def from_event() -> JobStatus:
            assert event is not None
            if event.get("state") == "ERROR":
                raise RuntimeError(
                    f"waiting for {engine.name} job {handle.ids} failed: {event.get('message')}"
                )
            return JobStatus(event["state"], event.get("raw", ""), event.get("message", ""))

        try:
            # without an event it waits here: execution_timeout or a kill interrupting the wait cancels
            # the job, which must not outlive the try (on_kill runs after this has forgotten the job)
            return finish(
                engine,
                handle,
                lambda status: self.engine_outcome(engine, handle, status),
                status_of=None if event is None else from_event,
                poll_interval=self.poll_interval,
                logger=self.log,
            )
        finally:
            self._job = None

    def resume_from_trigger(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_provider_dltrain.engines import JobHandle

        handle = JobHandle.from_dict(event["handle"])
        return self._finish(self._engine(), handle, event)

    def kill_job(self) -> bool:
        """Cancel the running job and tear down what it created (``on_kill``); return whether it did.

        A try stopped because the task was cleared while it ran leaves its job running: the next
        try finds it by name and re-attaches (see :mod:`~airflow_provider_dltrain.operators.cleared`).
        """
        from airflow_provider_dltrain.engines.base import describe_ids
        from airflow_provider_dltrain.engines.lifecycle import stop_job
        from airflow_provider_dltrain.operators import cleared

        if self._job is None:
            self._kill_requested = True  # a submission under way stops its job as soon as it is known
            return True
        engine, handle = self._job
        if cleared.cleared_while_running(self):
            self.log.info(
                "The task was cleared while its job ran (%s): leaving the job running; the next try "
                "re-attaches to it instead of starting another.",
                describe_ids(handle),
            )
            self._job = None
            return False
        try:
            stop_job(engine, handle, logger=self.log)
        finally:
            self._job = None
        return True
