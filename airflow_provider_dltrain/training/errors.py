"""One clear error for a failed training job: the rank that failed first, with its traceback."""

from __future__ import annotations

from typing import Any

from airflow_provider_dltrain.exceptions import DltrainUserError, TrainingFailedError
from airflow_provider_dltrain.lake.storage import StorageOptions
from airflow_provider_dltrain.training.rundir import read_json_files


class TrainingUserError(TrainingFailedError, DltrainUserError):
    """A rank failed on a deterministic user error (bad spec, bad data): retrying cannot help."""


def rank_errors(run_dir: str, storage_options: StorageOptions | None = None) -> list[dict[str, Any]]:
    """Error reports written by failed ranks, earliest first (``storage_options``: for ``s3://``)."""
    reports = read_json_files(run_dir, "errors", "rank-*.json", dict(storage_options or {}))
    return sorted(reports, key=lambda r: (float(r.get("time", 0)), int(r.get("rank", 0))))


def failure(
    run_dir: str,
    world_size: int,
    launcher_output: str = "",
    storage_options: StorageOptions | None = None,
) -> TrainingFailedError:
    """Build the error to raise: the first failing rank's traceback, or the launcher's output tail."""
    errors = rank_errors(run_dir, storage_options)
    if not errors:
        tail = launcher_output[-4000:]
        return TrainingFailedError(
            f"training failed before any of the {world_size} ranks reported an error (a crash, an "
            f"out-of-memory kill or a launcher problem); launcher output:\n{tail}"
        )
    first = errors[0]
    others = sorted({int(e["rank"]) for e in errors[1:]})
    also = f" (ranks {others} failed after it)" if others else ""
    message = (
        f"training failed on rank {first['rank']} of {world_size}{also}: "
        f"{first['type']}: {first['message']}\n"
        f"--- traceback of rank {first['rank']} ---\n{first['traceback']}"
    )
    cls = TrainingUserError if first.get("user_error") else TrainingFailedError
    return cls(message)


class TrialStopped(Exception):
    """Raised by ``ctx.log_metrics`` when the early-stopping rule ends the trial at ``step``.

    The worker turns it into a clean "stopped early" result: the run ends FINISHED, tagged
    ``dltrain.stopped_early=true``, with the last logged metrics and the model as it is at that step.
    A training function that calls ``ctx.should_stop()`` handles stopping itself and never sees it.
    """

    def __init__(self, step: int, reason: str) -> None:
        super().__init__(f"stopped early at step {step}: {reason}")
        self.step, self.reason = step, reason
