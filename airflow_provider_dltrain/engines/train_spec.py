"""Remote training: the ``TrainJobSpec`` a training job runs, and what every training engine shares.

The interface (stable; the SageMaker and EC2 engines are built on it):

- The launcher (``TrainModelOperator`` on the Airflow worker) resolves the pinned Delta version,
  opens the MLflow run (``training.runner.start_tracked_run``) and writes a :class:`TrainJobSpec`.
- A training engine (``engines.sagemaker``, ``engines.ec2``) is an :class:`~.base.Engine` whose
  ``stage(spec)`` takes a ``TrainJobSpec``: ``training_engine.TrainingEngine`` stages it with the code bundle
  (``engines.staging``: ``runs/<task_key>/<try>/spec.json``), and ``result(handle)`` reads rank 0's
  report back from ``runs/<task_key>/<try>/result.json``. Subclasses add submit/find/poll/cancel/
  teardown, and render how the service starts ``job_script.py --spec <uri> --code <uri>`` on every
  rank under torchrun (or mpirun): the same script the Spark engines run.
- On each rank ``jobs.entry`` sees ``"kind": "train"`` and calls ``jobs.train_entry.run``:
  it resolves the same version (and checks the content fingerprint), runs ``train(ctx)`` through
  ``training.rank_job.run_rank_job`` with torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables,
  and rank 0 writes its report (what the local backends return) to ``result_uri``.
- Ranks write their reports and tracebacks under ``run_dir`` (``runs/<task_key>/<try>``), so a
  failure names the rank that failed first; checkpoints go to ``checkpoint_uri`` (one per task
  and inputs, so a retry or a resumed spot job continues from the last one).

A spec holds no secrets. MLflow credentials reach a job through its environment only: the job
reads ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``/``_TOKEN``, or the Secrets Manager secret named by
``DLTRAIN_MLFLOW_SECRET_ID`` (a JSON object with those keys), see :func:`job_tracking_env`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_dltrain.engines.run_spec import RunIdentity
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.utils.env import CREDENTIAL_KEYS

TRAIN_SPEC_VERSION = 1
KIND = "train"
SECRET_ENV = "DLTRAIN_MLFLOW_SECRET_ID"  # names a Secrets Manager secret; the job reads it
CHECKPOINT_DIR_ENV = "DLTRAIN_CHECKPOINT_DIR"  # a local directory the service keeps across restarts


@dataclass(frozen=True)
class TrainJobSpec:
    """One training run on another machine, as JSON.

    :param train_fn: ``"package.module:function"``; the module ships in the code bundle.
    :param dataset: the pinned version (a DeltaRef dict); the job reads exactly it, never a copy.
    :param data_fingerprint: content fingerprint of the rows the launcher resolved; the job refuses
        to train when its own resolution differs.
    :param tags: the MLflow run's identity tags (code hash, params hash, ...), for the result.
    :param tracking_uri: the MLflow store, without any ``user:password@`` part.
    :param mlflow_run_id: the run the launcher opened; rank 0 logs metrics and the model into it.
    :param checkpoint_uri: where checkpoints persist (S3), synced to the job's local checkpoint dir.
    :param non_finite: what rank 0 does with a NaN or infinite metric (``training/finite.py``).
    :param wandb: rank 0's W&B run beside MLflow (``WandbSpec.to_dict``: the user's settings and
        the run's identity, no key); ``None``: MLflow only.
    """

    train_fn: str
    dataset: dict[str, Any]
    data_filter: list[Any]
    hparams: dict[str, Any]
    seed: int
    world_size: int
    data_fingerprint: str
    identity: RunIdentity = field(default_factory=RunIdentity)
    tags: dict[str, str] = field(default_factory=dict)
    tracking_uri: str | None = None
    registry_uri: str | None = None
    mlflow_run_id: str | None = None
    experiment_id: str | None = None
    checkpoint_uri: str | None = None
    result_uri: str | None = None
    code_uris: tuple[str, ...] = ()
    timeout_s: float = 1800.0
    non_finite: str = "fail_at_end"
    wandb: dict[str, Any] | None = None
    kind: str = KIND
    version: int = TRAIN_SPEC_VERSION

    def __post_init__(self) -> None:
        if ":" not in self.train_fn:
            raise InvalidSpecError(
                f"train_fn must be 'package.module:function' for a remote backend (the job imports it), "
                f"got {self.train_fn!r:.120}"
            )
        if int(self.world_size) < 1:
            raise InvalidSpecError(f"world_size must be >= 1, got {self.world_size!r}")
        from airflow_provider_dltrain.utils.non_finite import check_mode

        check_mode(self.non_finite, "non_finite of the training job spec")
        if self.tracking_uri and "@" in self.tracking_uri.split("://", 1)[-1].split("/", 1)[0]:
            raise InvalidSpecError("tracking_uri of a job spec must not carry user:password@")

    @property
    def run_dir(self) -> str:
        """Where ranks write their reports and tracebacks: the directory of ``result_uri``."""
        if not self.result_uri:
            raise InvalidSpecError("the spec is not staged yet: it has no result_uri")
        return self.result_uri.rsplit("/", 1)[0]

    def code_modules(self) -> list[str]:
        """Modules the code bundle must carry besides the provider: the training function's."""
        return [self.train_fn.split(":", 1)[0]]

    def to_json(self) -> str:
        try:
            return json.dumps(asdict(self), sort_keys=True, indent=1)
        except TypeError as err:
            raise InvalidSpecError(f"the training job spec must be plain JSON ({err})") from err

    @classmethod
    def from_json(cls, text: str | bytes) -> TrainJobSpec:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InvalidSpecError(f"training job spec is not JSON: {err}") from err
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise InvalidSpecError("not a training job spec (kind != 'train')")
        if data.get("version") != TRAIN_SPEC_VERSION:
            raise InvalidSpecError(
                f"training job spec version {data.get('version')!r} is not {TRAIN_SPEC_VERSION}: the job "
                "runs another release of airflow-provider-dltrain than the launcher; install the same one"
            )
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidSpecError(f"training job spec has unknown key(s) {unknown}")
        data["identity"] = RunIdentity(**data.get("identity") or {})
        data["code_uris"] = tuple(data.get("code_uris") or ())
        return cls(**data)


def is_train_spec(text: str | bytes) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("kind") == KIND


def checkpoint_key(spec: TrainJobSpec) -> str:
    """Same task, same inputs -> same checkpoints: a retry resumes, changed code or data does not."""
    parts = [spec.train_fn, spec.data_fingerprint, json.dumps(spec.hparams, sort_keys=True, default=str)]
    parts += [spec.tags.get("dltrain.code_hash", ""), str(spec.world_size)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def job_tracking_env(credentials: Mapping[str, str], secret_id: str | None) -> dict[str, str]:
    """The job's environment for MLflow: the secret's name when given, else the credentials.

    Prefer a secret: ``DescribeTrainingJob`` (and EC2 user data) show environment values to anyone
    who may describe the job; a secret name gives nothing away.
    """
    if secret_id:
        return {SECRET_ENV: secret_id}
    return {k: v for k, v in credentials.items() if k in CREDENTIAL_KEYS and v}
