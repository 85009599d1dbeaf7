"""``TrainingRequest``: one training run described once, and checked before any work starts.

What to train (``train_fn``, ``hparams``, ``code_version``), on which data (``dataset``,
``data_filter``, ``cutoff``, ``storage_options``), how it is tracked (``tracking``,
``experiment_name``, ``run_name``, ``tags``, ``early_stopping``, ``non_finite``,
``extra_tracking``) and where it runs (``backend``, ``backend_options``, ``run_key``,
``aws_clients``, ``poll_interval``). ``run_training`` builds one from its keywords,
``TrainModelOperator`` builds one per try, and both hand it to
:func:`~airflow_provider_dltrain.training.runner.run_training_request`; the in-process path and the
remote launcher read their settings from it, so each setting is spelled here only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.utils.non_finite import FAIL_AT_END, check_mode

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.filters import DataFilter
    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.lake.storage import StorageOptions
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.backends import Backend
    from airflow_provider_dltrain.training.rank_job import TrainFn

_IN_PROCESS = "the in-process backends (local, ddp, torch_distributor, horovod)"


def is_remote_backend(backend: Any) -> bool:
    """True for the backends that train as a job elsewhere (``"sagemaker"``, ``"ec2"``, ``"ray"``,
    ``"kubeflow"``)."""
    from airflow_provider_dltrain.engines import TRAINING_ENGINE_NAMES

    return isinstance(backend, str) and backend in TRAINING_ENGINE_NAMES


def checked_extra_tracking(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``extra_tracking`` (``None`` when it names no target), refused when malformed.

    Every backend accepts it: rank 0 runs dltrain's rank code in-process (local, ddp,
    torch_distributor, horovod) and in the job of every remote backend (sagemaker, ec2, ray,
    kubeflow), which gets the W&B spec in its job spec.
    """
    from airflow_provider_dltrain.training.wandb_tracking import parse_extra_tracking

    if parse_extra_tracking(value) is None:
        return None
    return dict(value or {})


@dataclass(frozen=True)
class TrainingRequest:
    """One training run: what to train, on which data, how it is tracked and where it runs.

    The fields are :func:`~airflow_provider_dltrain.training.runner.run_training`'s arguments, with
    the same names, defaults and meaning (see its docstring). Building one checks them, raising
    :class:`~airflow_provider_dltrain.exceptions.InvalidSpecError` naming the field before any data
    is read, backend started or MLflow run opened. Empty values are normalised (``hparams=None``
    and ``{}`` are one request; so are ``cutoff=""`` and ``None``), so equal requests train alike.
    """

    train_fn: TrainFn | str
    dataset: DeltaRef | Mapping[str, Any] | str
    hparams: Mapping[str, Any] | None = None
    _: KW_ONLY
    # what to train
    code_version: str | None = None
    # on which data
    data_filter: DataFilter | None = None
    cutoff: str | None = None
    storage_options: StorageOptions | None = field(default=None, repr=False)  # may hold AWS keys
    # how it is tracked
    tracking: TrackingConfig | Literal[False] | None = None
    experiment_name: str = "dltrain"
    run_name: str | None = None
    tags: Mapping[str, str] | None = None
    early_stopping: Mapping[str, Any] | None = None
    non_finite: str = FAIL_AT_END
    extra_tracking: Mapping[str, Any] | None = None
    # where it runs
    backend: Backend | str = "local"
    backend_options: Mapping[str, Any] | None = None
    run_key: str | None = None
    aws_clients: Callable[[str], Any] | None = field(default=None, repr=False)
    poll_interval: float = 30.0

    def __post_init__(self) -> None:
        from airflow_provider_dltrain.engines import options_dict
        from airflow_provider_dltrain.lake.ref import DeltaRef

        # parsed once, here: every later step (the run key, the tracked run, the job's spec) reads the
        # same DeltaRef, whichever form it came in (a DeltaRef, its dict from XCom, its JSON text)
        dataset = self.dataset
        if isinstance(dataset, Mapping) and not isinstance(dataset, dict):
            dataset = dict(dataset)
        try:
            self._set(dataset=DeltaRef.coerce(dataset))
        except InvalidSpecError as err:
            raise InvalidSpecError(f"dataset: {err}") from None
        check_mode(self.non_finite)
        self._set(extra_tracking=checked_extra_tracking(self.extra_tracking))
        self._set(
            hparams=dict(self.hparams or {}),
            tags=dict(self.tags or {}),
            code_version=self.code_version or None,
            cutoff=self.cutoff or None,
            backend_options=options_dict(self.backend_options),
        )
        if self.remote:
            self._check_remote()
        else:
            self._set(early_stopping=self._checked_stopping())
        if self.cutoff:  # registration needs a date: refuse anything else before the data is read
            from airflow_provider_dltrain.lake.partition import check_date

            check_date(self.cutoff, "cutoff")
        self._set(poll_interval=float(self.poll_interval))

    @property
    def ref(self) -> DeltaRef:
        """The dataset, parsed when the request was built."""
        from airflow_provider_dltrain.lake.ref import DeltaRef

        assert isinstance(self.dataset, DeltaRef)
        return self.dataset

    @property
    def remote(self) -> bool:
        """True when the run is a job elsewhere (SageMaker, EC2, Ray, Kubeflow), not in this process."""
        return is_remote_backend(self.backend)

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _check_remote(self) -> None:
        """What a job elsewhere cannot do: train unrecorded, or be stopped early by other trials."""
        if self.tracking is False:
            raise InvalidSpecError(
                f"backend={self.backend!r} logs the model into an MLflow run the job reaches: pass a "
                "TrackingConfig (or leave tracking unset for the default), not tracking=False"
            )
        if self.early_stopping:
            trial = self.early_stopping.get("trial")
            raise InvalidSpecError(
                f"early stopping runs on {_IN_PROCESS}, not on backend={self.backend!r}"
                + (
                    f": drop early_stopping from the search of trial {trial!r} or train the trials in-process"
                    if trial
                    else ""
                )
            )

    def _checked_stopping(self) -> dict[str, Any] | None:
        """The early-stopping settings with their rule checked (the rule needs the tracking store)."""
        stopping = self.early_stopping
        if not stopping:
            return None
        from airflow_provider_dltrain.experiments.stopping import StoppingSpec

        missing = [k for k in ("spec", "parent_run_id", "trial") if not stopping.get(k)]
        if missing or self.tracking is False:
            raise InvalidSpecError(
                f"early_stopping needs spec, parent_run_id and trial (missing {missing}) and an MLflow "
                "store (tracking=False has none): other trials' histories are read from it"
            )
        return {**dict(stopping), "spec": StoppingSpec.coerce(stopping["spec"]).to_dict()}


__all__ = ["TrainingRequest", "checked_extra_tracking", "is_remote_backend"]
