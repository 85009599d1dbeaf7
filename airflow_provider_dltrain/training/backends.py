"""Where the training function runs: this process, a TorchDistributor DDP job, DDP ranks forked here, or Horovod ranks.

A backend is anything with ``name``, ``world_size`` and ``run(job) -> rank 0's report`` that raises
:class:`~airflow_provider_dltrain.exceptions.TrainingFailedError` (or its user-error subclass) on
failure. Backends are chosen by composition - a name plus options, or an object - never by an
operator subclass per place. A backend whose ranks run on other machines also has
``shared_run_dir(run_id, plan) -> str | None``: a run directory they all reach (otherwise the run
directory is ``$DLTRAIN_HOME/runs/<run_id>`` on this machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_dltrain.engines.options import Options, options_dict
from airflow_provider_dltrain.engines.placement import PLACES, TRAINING, Place, add_place, names
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.storage import join
from airflow_provider_dltrain.training.errors import failure
from airflow_provider_dltrain.training.forked import DdpOptions, ForkedDDPBackend
from airflow_provider_dltrain.training.horovod_backend import HorovodBackend, HorovodOptions
from airflow_provider_dltrain.training.rank_job import RankJob, execute, record_failure
from airflow_provider_dltrain.training.rundir import (
    RUN_URI_ENV,
    check_run_uri,
    default_run_root,
    inherit_sys_path,
)

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.scan_plan import ScanPlan


@runtime_checkable
class Backend(Protocol):
    """Runs a :class:`RankJob` on ``world_size`` processes and returns rank 0's report."""

    name: str

    @property
    def world_size(self) -> int: ...

    def run(self, job: RankJob) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LocalOptions(Options):
    """``backend_options`` of ``backend="local"`` (:class:`LocalBackend`).

    :param num_threads: torch intra-op threads while training (default: torch's count the first time
        this process trains, kept for later runs whatever ``torch.set_num_threads`` did).
    """

    num_threads: int | None = None

    def check(self) -> None:
        if self.num_threads is not None and int(self.num_threads) < 1:
            raise InvalidSpecError(f"num_threads must be >= 1, got {self.num_threads!r}")
        self._set(num_threads=None if self.num_threads is None else int(self.num_threads))


class LocalBackend:
    """One process: this one. What a notebook, a test or a single Airflow task uses (options:
    :class:`LocalOptions`, or its fields as keywords)."""

    name = "local"

    def __init__(self, options: LocalOptions | Mapping[str, Any] | None = None, **given: Any) -> None:
        self.options = LocalOptions.of(options if options is not None else given)

    @property
    def world_size(self) -> int:
        return 1

    def run(self, job: RankJob) -> dict[str, Any]:
        import torch

        previous = torch.get_num_threads()
        # CPU kernels split sums by thread: a fixed count per configuration keeps results bit-identical
        torch.set_num_threads(self.options.num_threads or _default_threads())
        try:
            return execute(job, rank=0, world_size=1, local_rank=0)
        except Exception as err:
            record_failure(job.run_dir, 0, err, job.storage_options)
            raise failure(job.run_dir, 1, storage_options=job.storage_options) from err
        finally:
            torch.set_num_threads(previous)


@functools.cache
def _default_threads() -> int:
    import torch

    return int(torch.get_num_threads())


@dataclass(frozen=True)
class TorchDistributorOptions(Options):
    """``backend_options`` of ``backend="torch_distributor"`` (:class:`TorchDistributorBackend`).

    :param num_processes: number of ranks.
    :param local_mode: run on the driver (True) or on the cluster's executors (False).
    :param use_gpu: one GPU per process (needs Spark GPU resources configured).
    :param spark_conf: extra Spark settings if this backend has to start the session.
    :param run_uri: shared storage for run directories: ``s3://bucket/prefix`` or a path every node mounts.
    """

    num_processes: int = 2
    local_mode: bool = True
    use_gpu: bool = False
    spark_conf: Mapping[str, str] = dataclasses.field(default_factory=dict)
    run_uri: str | None = None

    def check(self) -> None:
        if int(self.num_processes) < 1:
            raise InvalidSpecError(f"num_processes must be >= 1, got {self.num_processes!r}")
        self._set(
            num_processes=int(self.num_processes),
            local_mode=bool(self.local_mode),
            use_gpu=bool(self.use_gpu),
            spark_conf=dict(self.spark_conf or {}),
            run_uri=check_run_uri(self.run_uri) if self.run_uri else None,
        )


class TorchDistributorBackend:
    """DDP over ``num_processes`` processes launched by ``pyspark.ml.torch.distributor.TorchDistributor``
    (options: :class:`TorchDistributorOptions`, or its fields as keywords).

    ``local_mode=True`` runs torchrun on this machine (gloo on CPU, one thread per process unless
    ``OMP_NUM_THREADS`` says otherwise - torchrun's rule, so the count is fixed per configuration);
    ``local_mode=False`` is the same call on a Spark cluster, one barrier task per process.

    On a cluster the ranks' reports, error reports and checkpoints go to shared storage, the run
    directory ``<run_uri>/<run_id>``; ``run_uri`` defaults to ``$DLTRAIN_RUN_URI``, else to
    ``_dltrain_runs`` beside the table (``s3://bucket/lake/digits`` -> ``s3://bucket/lake/_dltrain_runs``).
    ``s3://`` is reached with the job's storage options. Local mode keeps ``$DLTRAIN_HOME/runs/<run_id>``
    unless ``run_uri`` is given.
    """

    name = "torch_distributor"

    def __init__(
        self, options: TorchDistributorOptions | Mapping[str, Any] | None = None, **given: Any
    ) -> None:
        self.options = TorchDistributorOptions.of(options if options is not None else given)

    @property
    def world_size(self) -> int:
        return self.options.num_processes

    def shared_run_dir(self, run_id: str, plan: ScanPlan) -> str | None:
        """The run directory on shared storage that ranks on other machines can reach; ``None``: a local one."""
        root = self.options.run_uri
        if root is None and not self.options.local_mode:
            configured = os.environ.get(RUN_URI_ENV)
            root = check_run_uri(configured) if configured else default_run_root(plan.ref.uri)
        return join(root, run_id) if root else None

    def run(self, job: RankJob) -> dict[str, Any]:
        from airflow_provider_dltrain.etl.spark import spark_session
        from airflow_provider_dltrain.exceptions import require
        from airflow_provider_dltrain.training.pickling import dumps
        from airflow_provider_dltrain.training.rank_job import run_rank

        require("pyspark", "spark")
        from pyspark.ml.torch.distributor import TorchDistributor

        spark_session(conf=self.options.spark_conf)
        payload = dumps(job, job.train_fn)
        distributor = TorchDistributor(
            num_processes=self.options.num_processes,
            local_mode=self.options.local_mode,
            use_gpu=self.options.use_gpu,
        )
        try:
            with inherit_sys_path() if self.options.local_mode else contextlib.nullcontext():
                output = distributor.run(run_rank, payload)
        except Exception as err:
            raise failure(job.run_dir, self.options.num_processes, str(err), job.storage_options) from err
        if not isinstance(output, dict):
            raise failure(
                job.run_dir,
                self.options.num_processes,
                f"rank 0 returned {type(output).__name__}, not a report",
                job.storage_options,
            )
        return output


# the in-process places (engines.placement lists the adapters that run training as a job elsewhere)
for _backend, _options in (
    (LocalBackend, LocalOptions),
    (TorchDistributorBackend, TorchDistributorOptions),
    (ForkedDDPBackend, DdpOptions),
    (HorovodBackend, HorovodOptions),
):
    add_place(Place(_backend.name, frozenset({TRAINING}), _backend, _options, remote=False, regional=False))


def register_backend(name: str, factory: Callable[..., Backend]) -> None:
    """Make ``backend=name`` resolve to ``factory(**backend_options)``: a backend of your own, run in
    this process (its options are not checked before it is built)."""
    add_place(Place(name, frozenset({TRAINING}), factory, None, remote=False, regional=False))


def backend_options_class(name: str) -> type | None:
    """The options dataclass of backend ``name`` (a training engine's included); ``None`` if it has none."""
    where = PLACES.get(name)
    return where.options_class() if where is not None and TRAINING in where.runs else None


def checked_backend_options(backend: Any, options: Any) -> Any:
    """``options`` as the named backend's options object, names and values checked (an unknown key is
    refused naming it and the valid ones); a mapping with a Jinja value or a Jinja string is kept as it
    is, its names checked. A backend object, a templated name or a backend registered under a name of
    its own: ``options`` as a mapping."""
    from airflow_provider_dltrain.engines import check_engine_options

    return check_engine_options(backend, options, what="backend")


def get_backend(backend: str | Backend | None, options: Any = None) -> Backend:
    """A backend object from a name plus options, or the object itself (then ``options`` must be empty)."""
    if backend is None:
        backend = "local"
    if isinstance(backend, str):
        where = PLACES.get(backend)
        if where is None or TRAINING not in where.runs or where.remote:
            known = sorted(names(TRAINING, remote=False))
            raise InvalidSpecError(f"unknown training backend {backend!r}; known: {known}")
        if where.options_class() is not None:
            return where.factory_of()(where.options_of(options, what="backend"))  # type: ignore[misc]
        try:
            return where.factory_of()(**options_dict(options))  # type: ignore[misc]
        except TypeError as err:
            raise InvalidSpecError(
                f"backend_options {options_dict(options)} do not fit backend {backend!r}: {err}"
            ) from err
    if options:
        raise InvalidSpecError(
            "backend_options only apply when backend is given by name; configure the object instead"
        )
    if not isinstance(backend, Backend):
        raise InvalidSpecError(
            f"backend must be a name or have name/world_size/run(job); got {type(backend).__name__}"
        )
    return backend
