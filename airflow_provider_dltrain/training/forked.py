"""DDP on this machine with ranks forked from a warm process: ``backend="ddp"``.

TorchDistributor's local mode starts ``torchrun``, which starts every rank as a new Python process:
each training pays torchrun's own torch import, then in every rank the imports of torch, of
``torch._dynamo`` (DDP's constructor reads its config) and, on rank 0, of MLflow - about 10 s of a
2-rank run of the demo on 2 cores, more than its 12 epochs. Here the ranks are forked by
``torch.multiprocessing.start_processes(start_method="forkserver")`` from multiprocessing's fork
server, a fresh interpreter started once per process that has imported those modules: a process
that trains again and again (a notebook, a long-lived runner, a test session) pays the imports once.
The fork server is a new interpreter, not a fork of this process, so no thread, JVM gateway or
database connection of this process reaches the ranks.

What a rank sees is what a torchrun rank sees: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``, one torch thread unless ``OMP_NUM_THREADS`` says otherwise (torchrun's
rule), this process's environment, working directory and ``sys.path`` at the time of the call. So the
same job trains bit-identical weights under ``ddp`` and ``torch_distributor`` (a test holds it).

Limits: modules the fork server imported keep what they read from the environment when it started
(torch's ``TORCH_*`` switches; the provider and MLflow read theirs at call time). Ranks write their
output to ``<run_dir>/logs/rank-<r>.log``, which is copied to this process's log while they run.
When this process dies, the fork server ends and takes the ranks with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.engines.options import Options
from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.training.errors import failure
from airflow_provider_dltrain.training.rank_job import RankJob
from airflow_provider_dltrain.utils.ports import free_port

log = logging.getLogger("airflow_provider_dltrain.training")

# What every rank imports before its first step; the fork server imports them once. Missing ones
# (MLflow is an extra) are skipped by the fork server.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch._dynamo",
    "numpy",
    "pyarrow",
    "deltalake",
    "mlflow",
    "mlflow.tracking",
    "airflow_provider_dltrain.training.rank_job",
    "airflow_provider_dltrain.training.context",
    "airflow_provider_dltrain.training.tracking",
    "airflow_provider_dltrain.training.loader",
)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class DdpOptions(Options):
    """``backend_options`` of ``backend="ddp"`` (:class:`ForkedDDPBackend`).

    :param num_processes: number of ranks (each collective times out after the job's ``timeout_s``).
    """

    num_processes: int = 2

    def check(self) -> None:
        if int(self.num_processes) < 1:
            raise InvalidSpecError(f"num_processes must be >= 1, got {self.num_processes!r}")
        self._set(num_processes=int(self.num_processes))


class ForkedDDPBackend:
    """DDP over ``num_processes`` ranks forked on this machine from a warm fork server (gloo on CPU);
    options: :class:`DdpOptions` (or its fields as keywords)."""

    name = "ddp"

    def __init__(self, options: DdpOptions | Mapping[str, Any] | None = None, **given: Any) -> None:
        self.options = DdpOptions.of(options if options is not None else given)

    @property
    def world_size(self) -> int:
        return self.options.num_processes

    def run(self, job: RankJob) -> dict[str, Any]:
        import torch.multiprocessing as tmp
        from torch.multiprocessing.spawn import ProcessException

        from airflow_provider_dltrain.training.pickling import dumps

        _preload_fork_server()
        logs = os.path.join(job.run_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        result = os.path.join(logs, f"rank-0-report-{uuid.uuid4().hex}.pickle")
        args = (
            dumps(job, job.train_fn),
            self.options.num_processes,
            free_port(),
            dict(os.environ),
            os.getcwd(),
            [p for p in sys.path if p],
            logs,
            result,
        )
        tails = [_Tail(os.path.join(logs, f"rank-{r}.log"), r) for r in range(self.options.num_processes)]
        with _without_main_script():
            context = tmp.start_processes(
                _rank_main,
                args=args,
                nprocs=self.options.num_processes,
                join=False,
                start_method="forkserver",
            )
        try:
            while not context.join(timeout=0.5):
                for tail in tails:
                    tail.pump()
        except ProcessException as err:
            # join() has stopped the other ranks already
            raise failure(job.run_dir, self.options.num_processes, str(err), job.storage_options) from err
        except BaseException:
            _stop(context.processes)
            raise
        finally:
            for tail in tails:
                tail.pump(final=True)
        try:
            with open(result, "rb") as handle:
                report = pickle.load(handle)
        except OSError as err:
            raise failure(
                job.run_dir,
                self.options.num_processes,
                f"rank 0 ended without a report: {err}",
                job.storage_options,
            ) from err
        finally:
            with contextlib.suppress(OSError):
                os.remove(result)
        return dict(report)


@contextlib.contextmanager
def _without_main_script() -> Iterator[None]:
    """Start processes without running this program's main script again in them.

    multiprocessing runs the parent's ``__main__`` file again in every child it starts (as
    ``__mp_main__``) when the program was started as a script rather than with ``-m``. An Airflow
    worker is the console script ``airflow``: its task processes carry a database URL Airflow made
    unusable on purpose, and ``import airflow`` in a rank then fails before the rank starts. The ranks
    need nothing from the main script (the job is pickled by value, see ``pickling``), so its path
    is hidden while they are started, as it is under ``python -m``.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def warm_up() -> None:
    """Start the fork server now: its imports then run beside this process's own work (one core idle
    while Airflow starts, say) instead of delaying the first training."""
    from multiprocessing import forkserver

    _preload_fork_server()
    forkserver.ensure_running()


def _preload_fork_server() -> None:
    """Name the modules the fork server imports; it takes them when it starts (first use in this process)."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))


def _stop(processes: list[Any]) -> None:
    """Stop ranks still running (SIGTERM, then SIGKILL after 10 s) and reap them."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


class _Tail:
    """Copies the new complete lines of one rank's log file to this process's log."""

    def __init__(self, path: str, rank: int) -> None:
        self.path = path
        self.rank = rank
        self.offset = 0
        self.partial = b""

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        for raw in lines:
            line = raw.decode(errors="replace").rstrip()
            # rank 0 prefixes its own log lines; everything else gets the rank here
            log.info("%s", line if line.startswith("[rank ") else f"[rank {self.rank}] {line}")


def _rank_main(
    index: int,
    payload: bytes,
    world_size: int,
    port: int,
    environ: dict[str, str],
    cwd: str,
    path: list[str],
    logs: str,
    result: str,
) -> None:
    """One rank, in a process forked by the fork server: become a torchrun rank, then run the job."""
    _die_with_parent()
    os.environ.clear()
    os.environ.update(environ)
    threads = os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's rule for several ranks
    os.environ.update(
        RANK=str(index),
        LOCAL_RANK=str(index),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    os.chdir(cwd)
    sys.path[:] = path
    out = os.open(os.path.join(logs, f"rank-{index}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)

    import torch

    torch.set_num_threads(int(threads))
    from airflow_provider_dltrain.training.rank_job import run_rank

    report = run_rank(payload)
    if index == 0:
        tmp = f"{result}.tmp"
        with open(tmp, "wb") as handle:
            pickle.dump(report, handle)
        os.replace(tmp, result)


def _die_with_parent() -> None:
    """SIGKILL this rank when its parent, the fork server, ends; make the fork server end with the launcher.

    The fork server exits when every process holding its "alive" pipe has ended: the launcher, and
    every child it forked, which multiprocessing hands a copy. A rank closes its copy, so the launcher's
    death alone ends the fork server, and ``PR_SET_PDEATHSIG`` then ends the ranks.
    """
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # multiprocessing keeps the pipe there; there is no public handle
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
