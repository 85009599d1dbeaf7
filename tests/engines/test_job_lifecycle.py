"""The job lifecycle both launchers share (``engines.lifecycle``): re-attach, cancel, tear down.

The engine here is a stand-in for a service that misbehaves on cue (a cancel the service refuses), which
the fake AWS cannot be made to do.
"""

from __future__ import annotations

import logging

import pytest

from airflow_provider_dltrain.engines import JobHandle, JobStatus, RunIdentity, StagedRun
from airflow_provider_dltrain.engines.lifecycle import start_job, stop_job, wait_or_cancel


class Service:
    name = "stub"

    def __init__(self, running: JobHandle | None = None, poll_error: BaseException | None = None) -> None:
        self.running, self.poll_error, self.calls = running, poll_error, []

    def find(self, identity):
        return self.running

    def stage(self, spec):
        self.calls.append("stage")
        return StagedRun(spec, "mem://spec.json", "mem://script.py", "mem://code.zip", "mem://result.json")

    def submit(self, staged):
        self.calls.append("submit")
        return JobHandle("stub", {"job": "new"}, staged.result_uri)

    def poll(self, handle):
        if self.poll_error is not None:
            raise self.poll_error
        return JobStatus("SUCCEEDED", "DONE")

    def cancel(self, handle):
        self.calls.append("cancel")
        raise RuntimeError("AccessDenied: not allowed to stop the job")

    def teardown(self, handle):
        self.calls.append("teardown")


def test_a_job_still_running_is_reattached_without_making_a_spec():
    running = JobHandle("stub", {"job": "old"}, "mem://result.json")
    service = Service(running=running)

    def no_spec():
        raise AssertionError("a re-attaching start must not make a spec (it opens an MLflow run)")

    assert start_job(service, RunIdentity(), no_spec) == (running, True)
    assert service.calls == []


def test_with_no_job_running_the_spec_is_staged_and_submitted_once():
    service = Service()
    handle, reattached = start_job(service, RunIdentity(), lambda: "spec")
    assert (handle.ids, reattached, service.calls) == ({"job": "new"}, False, ["stage", "submit"])


def test_an_interrupted_wait_cancels_and_a_failing_cancel_is_logged_not_raised_over_the_interrupt(caplog):
    service = Service(poll_error=KeyboardInterrupt())
    handle = JobHandle("stub", {"job": "j"}, "mem://result.json")
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        wait_or_cancel(service, handle, poll_interval=0)
    assert service.calls == ["cancel"]
    assert "could not cancel stub job {'job': 'j'}: AccessDenied: not allowed to stop the job" in caplog.text


def test_stopping_a_killed_task_tears_down_even_when_the_cancel_fails():
    service = Service()
    with pytest.raises(RuntimeError, match="AccessDenied"):
        stop_job(service, JobHandle("stub", {"job": "j"}, "mem://result.json"))
    assert service.calls == ["cancel", "teardown"]
