"""Clearing a running task (not retrying it): its cloud job keeps running and the next try re-attaches.

Under a real scheduler (LocalExecutor), clearing a running task sets its state to ``restarting``, the
supervisor kills the try (``on_kill`` runs, and ``get_task_states`` answers ``restarting`` from it), and
the scheduler starts try 2. Here the supervisor's answer is the one thing given by hand: a test
process has no supervisor to ask.
"""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from engine_helpers import aws_client
from test_cloud_operators import _context, _operator, _running, cloud  # noqa: F401 - the fixture

from airflow_provider_dltrain.operators import cleared

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"manual__1": {"ingest": "restarting"}}, True),
        ({"manual__1": {"ingest": "running"}}, False),
        ({}, False),
        (RuntimeError("the supervisor is gone"), False),
    ],
)
def test_a_try_counts_as_cleared_only_when_the_api_says_restarting(answer, expected):
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    ti = mock.MagicMock(dag_id="d", run_id="manual__1", task_id="ingest", map_index=-1)
    kwargs = {"side_effect": answer} if isinstance(answer, Exception) else {"return_value": answer}
    with (
        mock.patch("airflow.sdk.get_current_context", return_value={"ti": ti}),
        mock.patch.object(RuntimeTaskInstance, "get_task_states", **kwargs) as states,
    ):
        assert cleared.cleared_while_running(object()) is expected
    states.assert_called_once_with(dag_id="d", task_ids=["ingest"], run_ids=["manual__1"], map_index=None)


def test_outside_a_task_process_a_kill_is_never_taken_for_a_clear():
    assert cleared.cleared_while_running(object()) is False


def test_clearing_a_running_glue_task_leaves_its_job_running_and_the_next_try_reattaches(cloud):  # noqa: F811
    glue = aws_client("glue", cloud["endpoint"])

    def runs():
        return [r for j in glue.get_jobs()["Jobs"] for r in glue.get_job_runs(JobName=j["Name"])["JobRuns"]]

    before = len(runs())
    first = _operator(cloud, "glue", transform="etl_jobs:slow", transform_params={"seconds": 6})
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(first.execute(_context(first.task_id))))
    worker.start()
    handle = _running(cloud, "glue", first)
    with mock.patch.object(cleared, "cleared_while_running", return_value=True):
        first.on_kill()
    (run,) = [r for r in runs() if r["Id"] == handle.ids["job_run_id"]]
    assert run["JobRunState"] == "RUNNING"  # not stopped: the next try will wait for it

    second = _operator(cloud, "glue", transform="etl_jobs:slow", transform_params={"seconds": 6})
    result = second.execute(_context(second.task_id, try_number=2))
    assert len(runs()) == before + 1  # one job for the task instance, cleared or not
    assert result["version"] == 0 and result["committed"] is True and result["rows_written"] == 3
    worker.join(60)
    assert not worker.is_alive()


def test_a_kill_arriving_while_the_job_is_submitted_stops_it_once_it_is_known(cloud):  # noqa: F811
    """``on_kill`` can come before the submit call returns (the job exists, the task does not know it
    yet): the try stops the job as soon as it knows it, and fails instead of waiting on it."""
    from airflow_provider_dltrain.engines.glue import GlueEngine

    glue = aws_client("glue", cloud["endpoint"])
    op = _operator(cloud, "glue", transform="etl_jobs:slow", transform_params={"seconds": 120})
    submit = GlueEngine.submit
    handles = []

    def submit_then_killed(engine, staged):
        handle = submit(engine, staged)
        handles.append(handle)
        op.on_kill()  # the supervisor's kill, before the task has heard of the job
        return handle

    with (
        mock.patch.object(GlueEngine, "submit", submit_then_killed),
        pytest.raises(RuntimeError, match=r"killed while glue job .* was submitted; it was stopped"),
    ):
        op.execute(_context(op.task_id))
    (handle,) = handles
    run = glue.get_job_run(JobName=handle.ids["job_name"], RunId=handle.ids["job_run_id"])["JobRun"]
    assert run["JobRunState"] == "STOPPED"
