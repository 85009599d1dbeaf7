"""EMR on EC2 on the fake AWS: ``command-runner.jar spark-submit`` steps execute locally, in order.

moto 5.2.5 marks a cluster's first step RUNNING forever, never ends a step, never auto-terminates a
transient cluster and lacks ``CancelSteps``. Here steps are born PENDING and the executor runs one step
per cluster at a time (PENDING -> RUNNING -> COMPLETED/FAILED/CANCELLED), applies ActionOnFailure,
terminates a cluster whose KeepJobFlowAliveWhenNoSteps is False once its steps are done, and a
terminate_job_flows kills the running step and cancels the rest, as real EMR does.
"""

# This module patches moto's classes in place: methods are replaced and attributes added.
# mypy: disable-error-code="method-assign, attr-defined, assignment"

from __future__ import annotations

from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.emr import models as emr_models
from moto.emr.exceptions import ValidationException
from moto.emr.responses import ElasticMapReduceResponse

from airflow_provider_dltrain.testing.local_executor import LocalCloudExecutor, iter_backends, venv_archive

CLUSTER_DONE = {"TERMINATING", "TERMINATED", "TERMINATED_WITH_ERRORS"}
STEP_UNFINISHED = {"PENDING", "RUNNING", "CANCEL_PENDING"}
# spark-submit options that take no value; every other "--opt" is followed by its value.
SPARK_SUBMIT_FLAGS = {"--verbose", "-v", "--supervise", "--help", "-h", "--version"}


def step_key(cluster: Any, step: Any) -> tuple[str, ...]:
    backend = cluster.emr_backend
    return ("emr", backend.account_id, backend.region_name, cluster.id, step.id)


def script_index(args: list[str]) -> int:
    """Index of the application script in ``["spark-submit", <options>, script.py, *script_args]``."""
    i = 1
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if arg.endswith(".py"):
                return i
            break  # a jar or something else: fall back to the first .py below
        i += 1 if (arg in SPARK_SUBMIT_FLAGS or "=" in arg) else 2
    for i, arg in enumerate(args[1:], start=1):
        if arg.endswith(".py"):
            return i
    raise ValueError(f"no .py application script in spark-submit args {args!r}")


def step_log_prefix(cluster: Any, step: Any) -> str | None:
    log_uri = cluster.log_uri or ""
    if not log_uri.startswith("s3://"):
        return None
    return f"{log_uri.rstrip('/')}/{cluster.id}/steps/{step.id}/"


def set_step(step: Any, state: str, message: str | None = None) -> None:
    step.state = state
    step.end_date_time = utcnow()
    if message:
        step.last_state_change_reason = message


def cancel_unfinished(ex: LocalCloudExecutor, cluster: Any, reason: str, after: Any = None) -> None:
    """Cancel the cluster's unfinished steps (only those after ``after`` when given); kill a running one."""
    steps = cluster.steps
    if after is not None:
        steps = steps[steps.index(after) + 1 :]
    for step in steps:
        if step.state in STEP_UNFINISHED:
            ex.kill(step_key(cluster, step))
            set_step(step, "CANCELLED", reason)


def terminate(cluster: Any, reason: str, with_errors: bool = False) -> None:
    cluster.last_state_change_reason = reason
    cluster.terminate()
    if with_errors:
        cluster.state = "TERMINATED_WITH_ERRORS"


def step_finished(ex: LocalCloudExecutor, cluster: Any, step: Any, returncode: int, message: str) -> None:
    if returncode == 0:
        set_step(step, "COMPLETED")
        return
    set_step(step, "FAILED", message)
    prefix = step_log_prefix(cluster, step)
    step.failure_details = {"Reason": "Unknown Error.", "Message": message}
    if prefix:
        step.failure_details["LogFile"] = prefix + "stderr"
    action = step.action_on_failure
    if action in ("TERMINATE_CLUSTER", "TERMINATE_JOB_FLOW"):
        cancel_unfinished(ex, cluster, f"Cancelled: step {step.id} failed", after=step)
        terminate(cluster, f"Shut down as step {step.id} failed", with_errors=True)
    elif action == "CANCEL_AND_WAIT":
        cancel_unfinished(ex, cluster, f"Cancelled: step {step.id} failed", after=step)
    # CONTINUE: the next step runs on the next poll.


def start_step(ex: LocalCloudExecutor, cluster: Any, step: Any) -> None:
    args = [str(a) for a in step.args]
    if not step.jar.endswith("command-runner.jar") or not args or args[0] != "spark-submit":
        raise ValueError(
            f"fake_aws only runs command-runner.jar spark-submit steps, got Jar={step.jar!r} Args={args[:2]!r}"
        )
    index = script_index(args)

    def on_exit(returncode: int, message: str) -> None:
        step_finished(ex, cluster, step, returncode, message)

    ex.launch(
        step_key(cluster, step),
        "emr",
        args[index],
        args[index + 1 :],
        on_exit,
        region=cluster.emr_backend.region_name,
        log_prefix=step_log_prefix(cluster, step),
        archive_uri=venv_archive(args[:index]),
    )
    step.state = "RUNNING"
    step.start_date_time = utcnow()
    cluster.state = "RUNNING"


def advance_cluster(ex: LocalCloudExecutor, cluster: Any) -> None:
    """One poll of one cluster: at most one state change, all under the executor lock."""
    if cluster.state in CLUSTER_DONE:
        cancel_unfinished(ex, cluster, "Cluster terminated")  # e.g. a state set directly in a test
        return
    if cluster.state in ("STARTING", "BOOTSTRAPPING"):
        cluster.state = "WAITING"  # provisioning takes one poll here
    running = [s for s in cluster.steps if s.state == "RUNNING" and ex.is_running(step_key(cluster, s))]
    if running:
        cluster.state = "RUNNING"
        return
    pending = next((s for s in cluster.steps if s.state == "PENDING"), None)
    if pending is not None and ex.claim(step_key(cluster, pending)):
        try:
            start_step(ex, cluster, pending)
        except Exception as exc:  # a bad step fails alone, with the reason where a caller looks
            step_finished(ex, cluster, pending, 1, f"fake_aws could not start the step: {exc}")
        return
    if cluster.steps and not cluster.keep_job_flow_alive_when_no_steps:
        terminate(cluster, "Steps completed")
    else:
        cluster.state = "WAITING"


def scan(ex: LocalCloudExecutor) -> None:
    for _account, _region, backend in iter_backends(emr_models.emr_backends):
        for cluster in list(backend.clusters.values()):
            with ex.lock:
                advance_cluster(ex, cluster)


def install(ex: LocalCloudExecutor) -> None:
    _patch_step_status()
    _patch_cluster(ex)
    _add_cancel_steps(ex)
    ex.scanners.append(scan)


def _patch_step_status() -> None:
    Step = emr_models.Step
    original_status = Step.status.fget

    def status(self: Any) -> dict[str, Any]:
        result = original_status(self)
        if getattr(self, "failure_details", None):  # moto's StepStatus has no FailureDetails
            result["FailureDetails"] = self.failure_details
        return result

    Step.status = property(status)


def _patch_cluster(ex: LocalCloudExecutor) -> None:
    Cluster = emr_models.Cluster
    original_bootstrap = Cluster.run_bootstrap_actions

    def run_bootstrap_actions(self: Any) -> None:
        original_bootstrap(self)
        if self.state == "WAITING":  # moto jumps to WAITING at creation; the executor moves it on
            self.state = "STARTING"

    Cluster.run_bootstrap_actions = run_bootstrap_actions

    original_add_steps = Cluster.add_steps

    def add_steps(self: Any, steps: list[dict[str, Any]]) -> list[Any]:
        before = getattr(self, "state", None)  # None while Cluster.__init__ adds the initial steps
        if before in CLUSTER_DONE:
            raise ValidationException(
                "A job flow that is shutting down, terminated, or finished may not be modified."
            )
        added = original_add_steps(self, steps)
        with ex.lock:
            for step in added:
                step.state = "PENDING"  # moto makes the first one RUNNING; only the executor may
                step.start_date_time = None
            if before is not None:
                self.state = before  # moto says RUNNING at once; the executor does when a step starts
        return added

    Cluster.add_steps = add_steps

    original_terminate = Cluster.terminate

    def terminate_cluster(self: Any) -> None:
        with ex.lock:
            cancel_unfinished(ex, self, "Cluster terminated")
            original_terminate(self)

    Cluster.terminate = terminate_cluster


def _add_cancel_steps(ex: LocalCloudExecutor) -> None:
    def cancel_steps(self: ElasticMapReduceResponse) -> ActionResult:
        cluster = self.backend.describe_cluster(self._get_param("ClusterId"))
        infos = []
        with ex.lock:
            for step_id in self._get_param("StepIds", []):
                step = next((s for s in cluster.steps if s.id == step_id), None)
                if step is None or step.state not in STEP_UNFINISHED:
                    state = "unknown" if step is None else step.state
                    infos.append({"StepId": step_id, "Status": "FAILED", "Reason": f"Step is {state}"})
                    continue
                ex.kill(step_key(cluster, step))
                set_step(step, "CANCELLED", "Cancelled by user")
                infos.append({"StepId": step_id, "Status": "SUBMITTED", "Reason": ""})
        return ActionResult({"CancelStepsInfoList": infos})

    ElasticMapReduceResponse.cancel_steps = cancel_steps
