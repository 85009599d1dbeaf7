"""SageMaker training on the fake AWS: the missing ``StopTrainingJob``, optionally jobs held InProgress.

moto 5.2.5 creates training jobs Completed and has no StopTrainingJob. Nothing runs a training job's
code yet (a later executor will); until then ``hold_in_progress`` stays off by default, because a job
held InProgress with nobody to finish it would make every waiter time out.
"""

from __future__ import annotations

from typing import Any

from moto.core.responses import EmptyResult
from moto.core.utils import utcnow
from moto.sagemaker import models as sm_models
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.responses import SageMakerResponse

from tests.support.local_executor import LocalCloudExecutor

STOPPABLE = {"InProgress", "Stopping"}


def job_key(account: str, region: str, name: str) -> tuple[str, ...]:
    return ("sagemaker", account, region, name)


def set_status(job: Any, status: str, secondary: str, reason: str | None = None) -> None:
    now = utcnow()
    job.training_job_status = status
    job.secondary_status = secondary
    job.last_modified_time = now
    job.secondary_status_transitions.append(
        {"Status": secondary, "StartTime": now, "StatusMessage": secondary}
    )
    if status not in STOPPABLE:
        job.training_end_time = now
    if reason:
        job.failure_reason = reason  # moto builds the response from __dict__: becomes FailureReason


def install(ex: LocalCloudExecutor, hold_in_progress: bool = False) -> None:
    if hold_in_progress:
        original_init = sm_models.FakeTrainingJob.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            self.training_job_status = "InProgress"
            self.secondary_status = "Starting"
            self.training_end_time = None

        sm_models.FakeTrainingJob.__init__ = __init__

    def stop_training_job(self: SageMakerResponse) -> EmptyResult:
        name = self._get_param("TrainingJobName")
        backend = self.sagemaker_backend
        with ex.lock:
            job = backend.training_jobs.get(name)
            if job is None:
                arn = sm_models.FakeTrainingJob.arn_formatter(name, backend.account_id, backend.region_name)
                raise ValidationError(message=f"Could not find training job '{arn}'.")
            if job.training_job_status not in STOPPABLE:
                raise ValidationError(
                    message=f"The request was rejected because the training job is in status "
                    f"{job.training_job_status}."
                )
            ex.kill(job_key(backend.account_id, backend.region_name, name))
            set_status(job, "Stopped", "Stopped")
        return EmptyResult()

    SageMakerResponse.stop_training_job = stop_training_job
