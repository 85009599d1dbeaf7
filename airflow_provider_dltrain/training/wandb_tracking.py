"""Weights & Biases as a second tracking target beside MLflow (MLflow stays the registry and the gate's source).

``run_training(..., extra_tracking={"wandb": {"project": "digits", "mode": "offline"}})`` makes rank 0
open one W&B run per training run and record in it: the hyper-parameters (secret-looking ones
replaced by ``***``), every metric rank 0 logs (per step), the final metrics, the pinned Delta version
as a W&B *reference* artifact (the version's ``_delta_log`` commit file: table URI + version, no copy
of the data), the MLflow run id and model URI, and the Airflow run identity (dag_id, run_id, task,
try). A W&B failure - at init or at any later call - is logged and training goes on, unless the
spec says ``required: True``; then the run fails with :class:`~airflow_provider_dltrain.exceptions.
ExtraTrackingError`. W&B collects nothing else: no console capture, code, git state, command line or
system metrics.

Rank 0 runs this on every backend: in this process on the in-process ones, and in the job on the
remote ones, whose ``TrainJobSpec`` carries :meth:`WandbSpec.to_dict` (settings and run identity, no key).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.exceptions import ExtraTrackingError, InvalidSpecError
from airflow_provider_dltrain.training.tracking import MODEL_NAME, RankTracker

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.scan_plan import ScanPlan

log = logging.getLogger("airflow_provider_dltrain.training")

TARGETS = ("wandb",)
MODES = ("online", "offline")
# hyper-parameter names whose values never reach W&B
_SECRET_NAME = re.compile(r"(password|passwd|secret|token|api_?key|credential|private_?key)", re.I)
# the run's tags that say which Airflow task try trained it (set by TrainModelOperator)
AIRFLOW_TAGS = ("dag_id", "run_id", "task_id", "try_number", "logical_date")


@dataclass(frozen=True)
class WandbSpec:
    """Where and how the W&B run is recorded (``extra_tracking["wandb"]``).

    :param project: the W&B project.
    :param entity: the W&B team or user (default: the API key's default entity).
    :param mode: ``"online"`` or ``"offline"`` (files under ``dir`` for ``wandb sync``); default W&B's
        own (``WANDB_MODE``).
    :param required: a W&B failure fails the training run (default: logged, training goes on).
    :param dir: where W&B writes its run files; default the run directory when it is local.
    :param tags: W&B run tags.
    """

    project: str
    entity: str | None = None
    mode: str | None = None
    required: bool = False
    dir: str | None = None
    tags: tuple[str, ...] = ()
    # filled in by run_training, not by users: the run's MLflow and Airflow identity
    run_info: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: Any) -> WandbSpec:
        """The spec from a dict (unknown keys, a missing project or a bad mode: ``InvalidSpecError``)."""
        if isinstance(value, WandbSpec):
            return value
        if not isinstance(value, Mapping):
            raise InvalidSpecError(
                f"extra_tracking['wandb'] must be a dict such as {{'project': ...}}, got {type(value).__name__}"
            )
        known = {f.name for f in fields(cls)} - {"run_info"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidSpecError(
                f"extra_tracking['wandb'] has unknown keys {unknown}; valid: {sorted(known)}"
            )
        if not value.get("project") or not isinstance(value["project"], str):
            raise InvalidSpecError("extra_tracking['wandb'] needs 'project': the W&B project name")
        mode = value.get("mode")
        if mode is not None and mode not in MODES:
            raise InvalidSpecError(f"extra_tracking['wandb']['mode'] must be one of {MODES}, got {mode!r}")
        return cls(
            project=str(value["project"]),
            entity=value.get("entity") or None,
            mode=mode,
            required=bool(value.get("required", False)),
            dir=value.get("dir") or None,
            tags=tuple(str(t) for t in value.get("tags") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON (what a remote job's spec carries, ``run_info`` included)."""
        return {
            "project": self.project,
            "entity": self.entity,
            "mode": self.mode,
            "required": self.required,
            "dir": self.dir,
            "tags": list(self.tags),
            "run_info": dict(self.run_info),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WandbSpec:
        """The spec :meth:`to_dict` wrote (checked as a user's, then its ``run_info`` restored)."""
        from dataclasses import replace

        user = {k: v for k, v in data.items() if k != "run_info"}
        return replace(
            cls.coerce(user), run_info={str(k): str(v) for k, v in (data.get("run_info") or {}).items()}
        )


def parse_extra_tracking(extra_tracking: Mapping[str, Any] | None) -> WandbSpec | None:
    """The W&B spec of ``extra_tracking`` (``None`` when absent); unknown targets are refused."""
    if not extra_tracking:
        return None
    if not isinstance(extra_tracking, Mapping):
        raise InvalidSpecError(
            f"extra_tracking must be a dict such as {{'wandb': {{'project': ...}}}}, got "
            f"{type(extra_tracking).__name__}"
        )
    unknown = sorted(set(extra_tracking) - set(TARGETS))
    if unknown:
        raise InvalidSpecError(f"extra_tracking has unknown targets {unknown}; valid: {list(TARGETS)}")
    return WandbSpec.coerce(extra_tracking["wandb"]) if extra_tracking.get("wandb") else None


def with_run_info(
    spec: WandbSpec, run_tags: Mapping[str, str], mlflow: Mapping[str, str | None]
) -> WandbSpec:
    """``spec`` plus the run's identity: MLflow run/experiment/store and the Airflow task try."""
    from dataclasses import replace

    from airflow_provider_dltrain.store.config import redact_uri

    info = {
        f"airflow.{name}": run_tags[f"dltrain.{name}"]
        for name in AIRFLOW_TAGS
        if run_tags.get(f"dltrain.{name}")
    }
    for key in (
        "dltrain.code_hash",
        "dltrain.params_hash",
        "dltrain.data_fingerprint",
        "dltrain.data_cutoff",
    ):
        if run_tags.get(key):
            info[key] = run_tags[key]
    info.update({f"mlflow.{k}": str(redact_uri(v)) for k, v in mlflow.items() if v})
    return replace(spec, run_info=info)


def run_spec(
    extra_tracking: Mapping[str, Any] | None,
    run_tags: Mapping[str, str],
    *,
    run_id: str | None,
    experiment_id: str | None,
    tracking_uri: str | None,
) -> WandbSpec | None:
    """The W&B spec of a training run (``None`` without one): the user's, with the run's identity."""
    spec = parse_extra_tracking(extra_tracking)
    if spec is None:
        return None
    mlflow = {"run_id": run_id, "experiment_id": experiment_id, "tracking_uri": tracking_uri}
    return with_run_info(spec, run_tags, mlflow)


def redacted_params(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters with every secret-looking name's value replaced by ``***`` (nested too)."""
    out: dict[str, Any] = {}
    for key, value in hparams.items():
        if _SECRET_NAME.search(str(key)):
            out[str(key)] = "***"
        elif isinstance(value, Mapping):
            out[str(key)] = redacted_params(value)
        else:
            out[str(key)] = value
    return out


def delta_log_entry(uri: str, version: int) -> str:
    """The commit file that *is* ``version`` of the table at ``uri`` (what the W&B reference names);
    ``file://`` for a local table, as W&B wants."""
    base = uri.rstrip("/")
    if "://" not in base:
        base = "file://" + os.path.abspath(base)
    return f"{base}/_delta_log/{int(version):020d}.json"


class WandbRankTracker(RankTracker):
    """Rank 0's recorder that also writes to a W&B run; MLflow (``inner``) is always written first."""

    def __init__(
        self, inner: RankTracker, spec: WandbSpec, hparams: Mapping[str, Any], plan: ScanPlan, run_dir: str
    ):
        super().__init__(inner.checkpoint_dir, inner.published_dir)
        self.inner, self.spec = inner, spec
        self.logged_keys = inner.logged_keys  # one set: the report names what MLflow got
        self.saved_paths = inner.saved_paths
        self._run: Any = None
        self._start(hparams, plan, run_dir)

    # -- guarded W&B calls ----------------------------------------------------------------------
    def _failed(self, what: str, err: BaseException) -> None:
        """A W&B call failed: end the W&B run, then raise when W&B is required, else warn once and
        go on without W&B."""
        message = f"W&B {what} failed for project {self.spec.project!r}: {type(err).__name__}: {err}"[:2000]
        run, self._run = self._run, None
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception as finish_err:  # the run is already unusable; MLflow has everything
                log.debug("W&B finish after a failure also failed: %s", finish_err)
        if self.spec.required:
            raise ExtraTrackingError(
                f"{message}. extra_tracking['wandb']['required'] is True, so the training run fails; check "
                "WANDB_API_KEY, the entity/project and the W&B server, or set required to False."
            ) from err
        log.warning("%s; training goes on without W&B (required is False)", message)

    def _start(self, hparams: Mapping[str, Any], plan: ScanPlan, run_dir: str) -> None:
        try:
            import wandb
        except ImportError:
            self._failed(
                "import", ImportError("wandb is not installed: pip install 'airflow-provider-dltrain[wandb]'")
            )
            return
        spec = self.spec
        where = spec.dir or (run_dir if "://" not in run_dir else None)
        if where:
            os.makedirs(where, exist_ok=True)
        try:
            self._run = wandb.init(
                project=spec.project,
                entity=spec.entity,
                mode=spec.mode,  # type: ignore[arg-type]
                dir=where,
                id=spec.run_info.get("mlflow.run_id") or None,
                tags=list(spec.tags),
                job_type="train",
                config={**redacted_params(hparams), "dltrain": dict(spec.run_info)},
                reinit="create_new",  # a caller's own active W&B run stays untouched
                settings=wandb.Settings(
                    console="off",  # the task log may hold what W&B must not
                    save_code=False,
                    disable_git=True,
                    x_disable_meta=True,  # no command line, environment or host facts
                    x_disable_stats=True,
                    x_disable_machine_info=True,
                    allow_offline_artifacts=True,
                    silent=True,
                ),
            )
            self._dataset(wandb, plan)
        except Exception as err:
            self._failed("init", err)

    def _dataset(self, wandb: Any, plan: ScanPlan) -> None:
        """The pinned Delta version as a reference artifact (online: an input of the run)."""
        ref = plan.ref
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", os.path.basename(ref.uri.rstrip("/")) or "table")
        artifact = wandb.Artifact(
            f"delta-{name}",
            type="dataset",
            metadata={
                "table_uri": ref.uri,
                "version": ref.version,
                "timestamp": ref.timestamp,
                "data_fingerprint": plan.fingerprint,
            },
        )
        artifact.add_reference(delta_log_entry(ref.uri, ref.version), name="delta_commit", checksum=False)
        aliases = [f"v{ref.version}"]
        if self._run.settings._offline:  # W&B 0.31 refuses use_artifact offline: logged instead
            self._run.log_artifact(artifact, aliases=aliases)
        else:
            self._run.use_artifact(artifact, aliases=aliases)
        self._run.summary.update({"dltrain.delta_uri": ref.uri, "dltrain.delta_version": ref.version})

    # -- RankTracker ----------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int | None) -> None:
        self.inner.log_metrics(metrics, step)
        if self._run is not None:
            try:
                self._run.log(dict(metrics), step=step)
            except Exception as err:
                self._failed("log", err)

    def log_model(self, model: Any, input_example: Any, name: str = MODEL_NAME) -> str:
        uri = self.inner.log_model(model, input_example, name=name)
        if self._run is not None:
            try:
                self._run.summary["mlflow.model_uri"] = uri
            except Exception as err:
                self._failed("summary", err)
        return uri

    def discard_model(self, model_uri: str) -> None:
        self.inner.discard_model(model_uri)

    def close(self, metrics: Mapping[str, float], error: BaseException | None) -> None:
        """Final metrics into the summary; the W&B run ends failed when training failed."""
        self.inner.close(metrics, error)
        run, self._run = self._run, None
        if run is None:
            return
        try:
            run.summary.update({k: float(v) for k, v in metrics.items()})
            if error is not None:
                run.summary["dltrain.failure"] = f"{type(error).__name__}"
            run.finish(exit_code=0 if error is None else 1)
        except Exception as err:
            self._run = None
            if error is None:
                self._failed("finish", err)
            else:  # the training error is the one to report
                log.warning("W&B finish failed: %s", err)


def wandb_tracker(inner: RankTracker, job: Any) -> RankTracker:
    """``inner`` wrapped by a W&B writer when the job asks for one (rank 0 only)."""
    spec = getattr(job, "wandb", None)
    if spec is None:
        return inner
    return WandbRankTracker(inner, spec, job.hparams, job.plan, job.run_dir)
