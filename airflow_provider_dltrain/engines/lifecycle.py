"""One job's lifecycle on an engine: find or stage and submit, wait, cancel, tear down. No Airflow.

Two callers, differing only in how they wait: ``training.remote.run_remote`` (``run_training`` from a
notebook or a script) waits in its own process; ``operators.engine_run.EngineRun`` (every operator
with ``engine=`` or a remote ``backend=``) waits or defers to the triggerer. What they share is here:
re-attaching to the job an earlier try or call left running instead of submitting a second one
(:func:`start_job`), cancelling a job whose wait was interrupted (a failing cancel is logged, never
raised over the interruption that caused it), the finish of every job - outcome, summary, teardown
(:func:`finish`) - and the stop of a killed one, in the task or in the triggerer (:func:`stop_job`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from airflow_provider_dltrain.engines.base import Engine, JobHandle, JobStatus, wait
from airflow_provider_dltrain.engines.run_spec import RunIdentity

log = logging.getLogger(__name__)
R = TypeVar("R")


def start_job(
    engine: Engine,
    identity: RunIdentity,
    make_spec: Callable[[], Any],
    *,
    earlier: str = "an earlier try",
    logger: Any = log,
) -> tuple[JobHandle, bool]:
    """The job running for ``identity`` (re-attached: ``True``), else ``make_spec()`` staged and submitted.

    ``make_spec`` is called only when nothing runs for ``identity``: a training launcher opens its
    MLflow run there, and a re-attaching retry must not open a second one.

    :param earlier: who started a re-attached job, for the log (``"an earlier try"``).
    """
    handle = engine.find(identity)
    if handle is not None:
        logger.info("re-attaching to %s job %s started by %s", engine.name, handle.ids, earlier)
        return handle, True
    staged = engine.stage(make_spec())
    logger.info("staged spec %s and code %s", staged.spec_uri, staged.code_uri)
    handle = engine.submit(staged)
    logger.info("submitted %s job %s", engine.name, handle.ids)
    return handle, False


def wait_or_cancel(
    engine: Engine, handle: JobHandle, *, poll_interval: float, logger: Any = log
) -> JobStatus:
    """The job's terminal status; an interrupted wait (a kill, a timeout, Ctrl-C) cancels the job first."""
    try:
        return wait(
            engine,
            handle,
            poll_interval=poll_interval,
            on_status=lambda s: logger.info("%s job %s: %s", engine.name, handle.ids, s.raw),
        )
    except BaseException:
        # the job must not outlive the wait that was meant to see it end
        cancel_quietly(engine, handle, logger=logger)
        raise


def cancel_quietly(engine: Engine, handle: JobHandle, *, logger: Any = log) -> None:
    """Cancel the job; a failing cancel is logged, so the error that led here is the one raised."""
    try:
        logger.info("cancelling %s job %s", engine.name, handle.ids)
        engine.cancel(handle)
    except Exception as err:
        logger.warning("could not cancel %s job %s: %s", engine.name, handle.ids, err)


def finish(
    engine: Engine,
    handle: JobHandle,
    outcome: Callable[[JobStatus], R],
    *,
    status_of: Callable[[], JobStatus] | None = None,
    poll_interval: float = 30.0,
    logger: Any = log,
) -> R:
    """The job's result: its terminal status, ``outcome(status)`` (which raises for a failed job), one
    summary in the log (before teardown: the summary names where the job's logs are), then the teardown
    of what the job created - whatever happens on the way.

    :param status_of: how the terminal status is known when it is not waited for here (the triggerer's
        event; it may raise, e.g. for an event that says the wait itself failed). ``None``: wait, and
        cancel the job if the wait is interrupted.
    """
    from airflow_provider_dltrain.engines.base import job_summary

    try:
        if status_of is None:
            status = wait_or_cancel(engine, handle, poll_interval=poll_interval, logger=logger)
        else:
            status = status_of()
        result = outcome(status)
        summary = result if isinstance(result, Mapping) else result.to_dict()  # type: ignore[attr-defined]
        logger.info("%s", job_summary(engine, handle, summary))
        return result
    finally:
        engine.teardown(handle)


def stop_job(
    engine: Engine,
    handle: JobHandle,
    *,
    logger: Any = log,
    before_teardown: Callable[[], None] | None = None,
) -> None:
    """Cancel the job and tear down what it created (a killed task, in its process or the triggerer's);
    ``before_teardown`` (ending a training's MLflow run: it reads the job's spec) and the teardown run
    even if the cancel fails."""
    try:
        logger.info("cancelling %s job %s", engine.name, handle.ids)
        engine.cancel(handle)
    finally:
        try:
            if before_teardown is not None:
                before_teardown()
        finally:
            engine.teardown(handle)
