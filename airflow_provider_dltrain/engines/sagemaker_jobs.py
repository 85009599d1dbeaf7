"""One SageMaker job kind (``Training``, ``Processing``) as both SageMaker adapters drive it.

The API is the same for both kinds but for the kind in every name (``create_training_job`` /
``create_processing_job``, ``TrainingJobName`` / ``ProcessingJobName``, ...) and the field a stopped
job's message comes from: :class:`JobKind` writes those names once, so the training adapter
(``sagemaker.py``) and the processing adapter (``sagemaker_processing.py``) keep only what differs
between them: the request and where a running job's spec is found.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobHandle,
    JobStatus,
)
from airflow_provider_dltrain.engines.resources import Clients, Resource, identity_of
from airflow_provider_dltrain.engines.run_spec import RunIdentity

log = logging.getLogger(__name__)

STATES = {
    "InProgress": RUNNING,
    "Stopping": RUNNING,
    "Completed": SUCCEEDED,
    "Failed": FAILED,
    "Stopped": CANCELLED,
}


@dataclass(frozen=True)
class JobKind:
    """The names of one SageMaker job kind.

    :param kind: ``"Training"`` or ``"Processing"``.
    :param console_path: the console's page of a job, after ``#/`` (``jobs``, ``processing-jobs``).
    :param detail: the field that says more when a job has no ``FailureReason`` (``SecondaryStatus``,
        ``ExitMessage``).
    """

    kind: str
    console_path: str
    detail: str

    @property
    def _snake(self) -> str:
        return self.kind.lower()

    def _name_arg(self, name: str) -> dict[str, str]:
        return {f"{self.kind}JobName": name}

    def create(self, client: Any, request: Mapping[str, Any]) -> str:
        """Create the job; one this try created already (a retried call) is attached to, not an error."""
        name = str(request[f"{self.kind}JobName"])
        try:
            getattr(client, f"create_{self._snake}_job")(**request)
        except client.exceptions.ResourceInUse:
            log.info("%s job %s exists already: attaching to it", self._snake, name)
        return name

    def handle(self, engine: str, region: str | None, name: str, result_uri: str) -> JobHandle:
        url = None
        if region:
            url = (
                f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}"
                f"#/{self.console_path}/{name}"
            )
        return JobHandle(engine, {"job_name": name}, result_uri, url)

    def describe(self, client: Any, name: str) -> dict[str, Any]:
        return dict(getattr(client, f"describe_{self._snake}_job")(**self._name_arg(name)))

    def find(
        self, client: Any, identity: RunIdentity, spec_uri_of: Callable[[dict[str, Any]], str]
    ) -> tuple[str, str] | None:
        """``(job name, result URI)`` of the newest InProgress job of any try of ``identity``'s task run.

        :param spec_uri_of: where the described job names its staged spec.
        """
        prefix = identity.job_name.rsplit("-t", 1)[0] + "-t"
        pages = client.get_paginator(f"list_{self._snake}_jobs").paginate(
            NameContains=prefix, StatusEquals="InProgress"
        )
        names = sorted(
            (j["CreationTime"], j[f"{self.kind}JobName"])
            for page in pages
            for j in page.get(f"{self.kind}JobSummaries", [])
            if j[f"{self.kind}JobName"].startswith(prefix)
        )
        if not names:
            return None
        name = names[-1][1]
        spec_uri = spec_uri_of(self.describe(client, name))
        return name, spec_uri.rsplit("/", 1)[0] + "/result.json"

    def poll(self, client: Any, name: str) -> JobStatus:
        job = self.describe(client, name)
        raw = job[f"{self.kind}JobStatus"]
        return JobStatus(
            STATES.get(raw, PENDING), raw, job.get("FailureReason") or job.get(self.detail) or ""
        )

    def cancel(self, client: Any, name: str) -> None:
        """Stop the job if it still runs (a finished job is left as it is)."""
        if self.describe(client, name)[f"{self.kind}JobStatus"] == "InProgress":
            self.stop(client, name)

    def stop(self, client: Any, name: str) -> None:
        getattr(client, f"stop_{self._snake}_job")(**self._name_arg(name))

    def live_jobs(self, clients: Clients, resource_kind: str) -> Iterator[Resource]:
        """Every InProgress job of this kind tagged with a task identity (for the reaper)."""
        client = clients("sagemaker")
        pages = client.get_paginator(f"list_{self._snake}_jobs").paginate(StatusEquals="InProgress")
        for summary in (j for page in pages for j in page.get(f"{self.kind}JobSummaries", [])):
            tags = client.list_tags(ResourceArn=summary[f"{self.kind}JobArn"]).get("Tags", [])
            identity = identity_of(tags)
            if identity is None:
                continue
            name = summary[f"{self.kind}JobName"]
            yield Resource(
                resource_kind,
                name,
                identity,
                summary[f"{self.kind}JobStatus"],
                summary.get("CreationTime"),
                {"job_name": name},
            )


TRAINING = JobKind("Training", "jobs", "SecondaryStatus")
PROCESSING = JobKind("Processing", "processing-jobs", "ExitMessage")
