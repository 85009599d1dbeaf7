"""``backend="horovod"``: the same ``train(ctx)`` on ranks started by ``horovodrun --gloo``.

The launcher side, :class:`HorovodBackend`, pickles the :class:`RankJob` into the run directory and
runs ``horovodrun --gloo -np N -H localhost:N python -m airflow_provider_dltrain.training.horovod_main
<job file>``. The rank side, :func:`run_horovod_rank`, is what any Horovod launch (``horovodrun``
or ``mpirun`` on a SageMaker or EC2 node) calls: ``hvd.init()``, ranks from Horovod, then the
shared :func:`~airflow_provider_dltrain.training.rank_job.execute` with :class:`HorovodCollectives`,
so ``ctx.wrap``, ``ctx.allreduce`` and ``ctx.barrier`` go through Horovod and the training
function cannot tell. Horovod is not on PyPI in a form that builds against torch 2.13: build it
with ``make horovod`` (``docker/jobs/build_horovod.sh``).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.exceptions import InvalidSpecError, MissingExtraError
from airflow_provider_dltrain.lake.storage import is_remote
from airflow_provider_dltrain.training.errors import failure
from airflow_provider_dltrain.training.rank_job import RankJob, execute, record_failure
from airflow_provider_dltrain.training.rundir import check_run_uri, read_json_files

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.scan_plan import ScanPlan
    from airflow_provider_dltrain.training.context import ReduceOp

log = logging.getLogger("airflow_provider_dltrain.training")
JOB_FILE = "job.pkl"
_ENTRY = "airflow_provider_dltrain.training.horovod_main"


def import_horovod() -> Any:
    """``horovod.torch``, or an ImportError that says how to build it."""
    try:
        import horovod.torch as hvd
    except ImportError as err:
        raise MissingExtraError(
            "horovod is not installed: run `make horovod` (or docker/jobs/build_horovod.sh PYTHON); "
            "Horovod 0.28.1 needs a C++17 patch to build against torch 2.13, so plain pip fails"
        ) from err
    return hvd


class _GradientAverager:
    """Averages each gradient over ranks as ``backward`` accumulates it, like DDP - not in ``step``.

    ``hvd.DistributedOptimizer`` would need the optimizer, which the training function creates
    after ``ctx.wrap``; per-parameter hooks need only the model. Each hook starts an asynchronous
    Horovod allreduce (Horovod fuses them); the last one waits for all, so gradients are averaged
    when ``backward`` returns, before clipping or ``step``. Parameters a backward pass never
    reached are flushed by a step pre-hook, as Horovod's own optimizer does.
    """

    def __init__(self, hvd: Any, model: Any, prefix: str) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.hvd = hvd
        self.params = [(f"{prefix}.{n}", p) for n, p in model.named_parameters() if p.requires_grad]
        self.pending: dict[str, Any] = {}
        self.hooks = [p.register_post_accumulate_grad_hook(self._hook(n)) for n, p in self.params]
        self.hooks.append(register_optimizer_step_pre_hook(self._flush))

    def _hook(self, name: str) -> Any:
        def hook(param: Any) -> None:
            self.pending[name] = self.hvd.allreduce_async_(param.grad, name=name, op=self.hvd.Average)
            if len(self.pending) == len(self.params):
                self.synchronize()

        return hook

    def synchronize(self) -> None:
        for handle in self.pending.values():
            self.hvd.synchronize(handle)
        self.pending.clear()

    def _flush(self, *_: Any) -> None:
        if self.pending:
            self.synchronize()

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()


class HorovodCollectives:
    """``TrainContext``'s collectives through Horovod (gloo or MPI, whichever ``hvd.init`` found)."""

    def __init__(self, hvd: Any) -> None:
        self.hvd = hvd
        self.averagers: list[_GradientAverager] = []

    @property
    def name(self) -> str:
        """``horovod/mpi`` under ``mpirun`` (Horovod's MPI controller), else ``horovod/gloo``."""
        return f"horovod/{'mpi' if self.hvd.mpi_enabled() else 'gloo'}"

    def wrap(self, model: Any) -> Any:
        """Broadcast rank 0's parameters and buffers; average gradients over ranks from now on."""
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.averagers.append(_GradientAverager(self.hvd, model, f"dltrain.grad{len(self.averagers)}"))
        return model

    def allreduce(self, tensor: Any, op: ReduceOp) -> Any:
        ops = {"sum": self.hvd.Sum, "mean": self.hvd.Average, "max": self.hvd.Max, "min": self.hvd.Min}
        return self.hvd.allreduce(tensor, op=ops[op])

    def barrier(self) -> None:
        self.hvd.barrier()

    def close(self) -> None:
        for averager in self.averagers:
            averager.close()


def run_horovod_rank(payload: bytes) -> dict[str, Any]:
    """Run one rank of a pickled :class:`RankJob` under Horovod; return this rank's report.

    Call it in every process a Horovod launcher starts (``horovodrun``, ``mpirun``): it calls
    ``hvd.init()``, takes rank, size and local rank from Horovod, pins the local GPU when there is
    one, and records a failing rank's traceback under the run directory before re-raising.
    """
    from airflow_provider_dltrain.training.pickling import loads

    return run_horovod_job(loads(payload))


def run_horovod_job(job: RankJob) -> dict[str, Any]:
    """:func:`run_horovod_rank` for a job built in this process (a cloud job's entry point builds its own)."""
    hvd = import_horovod()
    hvd.init()
    rank, world_size, local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
    if rank == 0 and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(message)s")
    collectives = HorovodCollectives(hvd)
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
        report = execute(job, rank, world_size, local_rank, collectives=collectives)
    except BaseException as err:
        # no hvd.shutdown(): peers may sit in a collective; horovodrun stops them
        record_failure(job.run_dir, rank, err, job.storage_options)
        raise
    finally:
        collectives.close()
    hvd.shutdown()
    return report


def main(argv: list[str]) -> int:
    """``python -m airflow_provider_dltrain.training.horovod_main JOB_FILE``: one Horovod rank."""
    if len(argv) != 1:
        print(f"usage: python -m {_ENTRY} JOB_FILE", file=sys.stderr)
        return 2
    with open(argv[0], "rb") as handle:
        run_horovod_rank(handle.read())
    return 0


@dataclass(frozen=True)
class HorovodOptions(Options):
    """``backend_options`` of ``backend="horovod"`` (:class:`HorovodBackend`).

    :param num_processes: number of ranks.
    :param hosts: ``horovodrun -H`` value (default, empty: ``localhost:<num_processes>``); hosts other than
        this one are reached over SSH and need ``run_uri`` on a path every host mounts.
    :param run_uri: directory for run directories that every host reaches (a mounted path).
    :param start_timeout: seconds ``horovodrun`` waits for all ranks to start.
    """

    num_processes: int = 2
    hosts: str = ""
    run_uri: str | None = None
    start_timeout: int = 60

    def check(self) -> None:
        if int(self.num_processes) < 1:
            raise InvalidSpecError(f"num_processes must be >= 1, got {self.num_processes!r}")
        if self.run_uri and is_remote(check_run_uri(self.run_uri)):
            raise InvalidSpecError(
                f"run_uri {self.run_uri!r}: the horovod backend needs a path every host mounts, not object storage"
            )
        self._set(
            num_processes=int(self.num_processes),
            hosts=self.hosts or f"localhost:{int(self.num_processes)}",
            run_uri=check_run_uri(self.run_uri) if self.run_uri else None,
            start_timeout=int(self.start_timeout),
        )


class HorovodBackend:
    """``train(ctx)`` on ``num_processes`` Horovod ranks over gloo, launched by ``horovodrun``
    (options: :class:`HorovodOptions`, or its fields as keywords).

    Like torchrun, each rank gets ``OMP_NUM_THREADS=1`` unless the environment sets it, so the
    thread count (and with it the float sums) is fixed per configuration. Ranks only ever see the
    pickled job: MLflow credentials travel inside it (a file readable by its owner, removed after
    the run), not through ``horovodrun``'s command line.
    """

    name = "horovod"

    def __init__(self, options: HorovodOptions | Mapping[str, Any] | None = None, **given: Any) -> None:
        self.options = HorovodOptions.of(options if options is not None else given)

    @property
    def world_size(self) -> int:
        return self.options.num_processes

    def shared_run_dir(self, run_id: str, plan: ScanPlan) -> str | None:
        """``<run_uri>/<run_id>`` when ``run_uri`` is set; ``None``: ``$DLTRAIN_HOME/runs/<run_id>``."""
        return os.path.join(self.options.run_uri, run_id) if self.options.run_uri else None

    def command(self, job_file: str) -> list[str]:
        """The ``horovodrun`` command line that runs every rank of ``job_file``."""
        return [
            _horovodrun(),
            "--gloo",
            "-np",
            str(self.options.num_processes),
            "-H",
            self.options.hosts,
            "--start-timeout",
            str(self.options.start_timeout),
            sys.executable,
            "-m",
            _ENTRY,
            job_file,
        ]

    def run(self, job: RankJob) -> dict[str, Any]:
        from airflow_provider_dltrain.training.pickling import dumps

        import_horovod()
        os.makedirs(job.run_dir, exist_ok=True)
        job_file = os.path.join(job.run_dir, JOB_FILE)
        descriptor = os.open(job_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(dumps(job, job.train_fn))
        try:
            code, output = _launch(self.command(job_file), _rank_environment(job))
        finally:
            os.remove(job_file)
        reports = [r for r in read_json_files(job.run_dir, "ranks", "rank-0.json", {}) if r.get("rank") == 0]
        if code != 0 or not reports:
            detail = output if code != 0 else f"horovodrun exited 0 but rank 0 wrote no report\n{output}"
            raise failure(job.run_dir, self.options.num_processes, detail)
        return reports[0]


def _horovodrun() -> str:
    """``horovodrun`` of this interpreter's environment (not whichever is first on ``PATH``)."""
    here = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    found = here if os.access(here, os.X_OK) else shutil.which("horovodrun")
    if not found:
        raise MissingExtraError(
            "horovodrun not found: run `make horovod` (or docker/jobs/build_horovod.sh PYTHON)"
        )
    return found


def _rank_environment(job: RankJob) -> dict[str, str]:
    """The launcher's environment plus this interpreter's import path, one thread and the job's timeout."""
    from airflow_provider_dltrain.training.rundir import inherit_sys_path

    with inherit_sys_path():
        env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms (default 1) to negotiate and
    # fuse; each wake-up costs a rank CPU it would train with. bench_horovod (2 ranks, 2 cores):
    # 750 samples/s at 1 ms, 830 at 5, 845 at 10, 839 at 25, against DDP's 850-940 in the same runs.
    env.setdefault("HOROVOD_CYCLE_TIME", "10")
    env.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(int(job.timeout_s)))
    return env


def _launch(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``horovodrun``, relaying its lines to the log; its exit code and last 200 lines."""
    tail: collections.deque[str] = collections.deque(maxlen=200)
    log.info("launching %s", " ".join(command[:7]))
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line)
                log.info("%s", line.rstrip())
            return proc.wait(), "".join(tail)
        except BaseException:
            proc.terminate()  # the task was killed: no rank outlives it
            raise
