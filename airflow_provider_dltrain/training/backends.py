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
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.storage import join
from airflow_provider_dltrain.training.errors import failure
from airflow_provider_dltrain.training.forked import ForkedDDPBackend
from airflow_provider_dltrain.training.horovod_backend import HorovodBackend
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
class LocalOptions:
    """``backend_options`` of ``backend="local"`` (:class:`LocalBackend`), typed: the keyword arguments its constructor takes."""

    num_threads: int | None = None


class LocalBackend:
    """One process: this one. What a notebook, a test or a single Airflow task uses."""

    name = "local"

    def __init__(self, num_threads: int | None = None) -> None:
        """:param num_threads: torch intra-op threads while training (default: torch's count the
        first time this process trains, kept for later runs whatever ``torch.set_num_threads`` did).
        """
        self.num_threads = num_threads

    @property
    def world_size(self) -> int:
        return 1

    def run(self, job: RankJob) -> dict[str, Any]:
        import torch

        previous = torch.get_num_threads()
        # CPU kernels split sums by thread: a fixed count per configuration keeps results bit-identical
        torch.set_num_threads(self.num_threads or _default_threads())
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
class TorchDistributorOptions:
    """``backend_options`` of ``backend="torch_distributor"`` (:class:`TorchDistributorBackend`), typed: the keyword arguments its constructor takes."""

    num_processes: int = 2
    local_mode: bool = True
    use_gpu: bool = False
    spark_conf: Mapping[str, str] | None = None
    run_uri: str | None = None


class TorchDistributorBackend:
    """DDP over ``num_processes`` processes launched by ``pyspark.ml.torch.distributor.TorchDistributor``.

    ``local_mode=True`` runs torchrun on this machine (gloo on CPU, one thread per process unless
    ``OMP_NUM_THREADS`` says otherwise - torchrun's rule, so the count is fixed per configuration);
    ``local_mode=False`` is the same call on a Spark cluster, one barrier task per process.

    On a cluster the ranks' reports, error reports and checkpoints go to shared storage, the run
    directory ``<run_uri>/<run_id>``; ``run_uri`` defaults to ``$DLTRAIN_RUN_URI``, else to
    ``_dltrain_runs`` beside the table (``s3://bucket/lake/digits`` -> ``s3://bucket/lake/_dltrain_runs``).
    ``s3://`` is reached with the job's storage options. Local mode keeps ``$DLTRAIN_HOME/runs/<run_id>``
    unless ``run_uri`` is given.

    :param num_processes: number of ranks.
    :param local_mode: run on the driver (True) or on the cluster's executors (False).
    :param use_gpu: one GPU per process (needs Spark GPU resources configured).
    :param spark_conf: extra Spark settings if this backend has to start the session.
    :param run_uri: shared storage for run directories: ``s3://bucket/prefix`` or a path every node mounts.
    """

    name = "torch_distributor"

    def __init__(
        self,
        num_processes: int = 2,
        local_mode: bool = True,
        use_gpu: bool = False,
        spark_conf: Mapping[str, str] | None = None,
        run_uri: str | None = None,
    ) -> None:
        if int(num_processes) < 1:
            raise InvalidSpecError(f"num_processes must be >= 1, got {num_processes!r}")
        self.num_processes = int(num_processes)
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.spark_conf = dict(spark_conf or {})
        self.run_uri = check_run_uri(run_uri) if run_uri else None

    @property
    def world_size(self) -> int:
        return self.num_processes

    def shared_run_dir(self, run_id: str, plan: ScanPlan) -> str | None:
        """The run directory on shared storage that ranks on other machines can reach; ``None``: a local one."""
        root = self.run_uri
        if root is None and not self.local_mode:
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

        spark_session(conf=self.spark_conf)
        payload = dumps(job, job.train_fn)
        distributor = TorchDistributor(
            num_processes=self.num_processes, local_mode=self.local_mode, use_gpu=self.use_gpu
        )
        try:
            with inherit_sys_path() if self.local_mode else contextlib.nullcontext():
                output = distributor.run(run_rank, payload)
        except Exception as err:
            raise failure(job.run_dir, self.num_processes, str(err), job.storage_options) from err
        if not isinstance(output, dict):
            raise failure(
                job.run_dir,
                self.num_processes,
                f"rank 0 returned {type(output).__name__}, not a report",
                job.storage_options,
            )
        return output


_BUILT_IN: dict[str, Callable[..., Backend]] = {
    LocalBackend.name: LocalBackend,
    TorchDistributorBackend.name: TorchDistributorBackend,
    ForkedDDPBackend.name: ForkedDDPBackend,
    HorovodBackend.name: HorovodBackend,
}
BACKENDS: dict[str, Callable[..., Backend]] = dict(_BUILT_IN)


def register_backend(name: str, factory: Callable[..., Backend]) -> None:
    """Make ``backend=name`` resolve to ``factory(**backend_options)`` (e.g. a SageMaker or EC2 backend)."""
    BACKENDS[name] = factory


def backend_options_class(name: str) -> type | None:
    """The options dataclass of a built-in backend ``name`` (a training engine's included)."""
    from airflow_provider_dltrain.engines import options_class
    from airflow_provider_dltrain.training.forked import DdpOptions
    from airflow_provider_dltrain.training.horovod_backend import HorovodOptions

    classes: dict[str, type] = {
        LocalBackend.name: LocalOptions,
        TorchDistributorBackend.name: TorchDistributorOptions,
        ForkedDDPBackend.name: DdpOptions,
        HorovodBackend.name: HorovodOptions,
    }
    return classes.get(name) or options_class(name)


def check_backend_options(backend: Any, options: Any) -> None:
    """Refuse an option the named backend does not take, naming it and listing the valid ones.

    A backend object, a templated name, a Jinja string of options or a backend registered with
    :func:`register_backend` under a name of its own are not checked here.
    """
    import dataclasses

    from airflow_provider_dltrain.engines import options_dict

    if not isinstance(backend, str) or "{{" in backend or isinstance(options, str) or not options:
        return
    cls = backend_options_class(backend)
    if cls is None or BACKENDS.get(backend) not in (None, *_BUILT_IN.values()):
        return
    valid = sorted(f.name for f in dataclasses.fields(cls))
    for key in sorted(options_dict(options), key=str):
        if key not in valid:
            raise InvalidSpecError(
                f"unknown backend option {key!r} for backend {backend!r}; valid: {', '.join(valid)}"
            )


def checked_backend_options(backend: Any, options: Any) -> dict[str, Any]:
    """``options`` (a dict or the backend's options dataclass) as a dict, an unknown key refused."""
    from airflow_provider_dltrain.engines import options_dict

    check_backend_options(backend, options)
    return options_dict(options)


def get_backend(backend: str | Backend | None, options: Mapping[str, Any] | None = None) -> Backend:
    """A backend object from a name plus options, or the object itself (then ``options`` must be empty)."""
    if backend is None:
        backend = "local"
    if isinstance(backend, str):
        factory = BACKENDS.get(backend)
        if factory is None:
            raise InvalidSpecError(f"unknown training backend {backend!r}; known: {sorted(BACKENDS)}")
        from airflow_provider_dltrain.engines import options_dict

        try:
            return factory(**options_dict(options))
        except TypeError as err:
            raise InvalidSpecError(
                f"backend_options {dict(options or {})} do not fit backend {backend!r}: {err}"
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
