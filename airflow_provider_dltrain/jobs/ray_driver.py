"""The driver of a Ray training job: ``train(ctx)`` on N Ray Train workers under ``TorchTrainer``.

Started by ``jobs.entry`` when the job's environment says ``DLTRAIN_ENGINE=ray`` (see
``engines.ray_jobs``). Ray Train starts the workers, sets torchrun's variables in each (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``) and opens the process group (Gloo, or NCCL with GPUs);
each worker then runs the rank exactly as a SageMaker or EC2 rank does (``train_entry.run``): it
resolves the pinned Delta version itself, refuses rows other than the launcher's, trains, and rank 0
writes the report to the result URI. A failing worker records its traceback under the run
directory; Ray Train stops the others and this driver exits 1, so the job ends FAILED.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from airflow_provider_dltrain.engines.objects import object_exists, write_object
from airflow_provider_dltrain.engines.train_spec import TrainJobSpec

log = logging.getLogger("airflow_provider_dltrain.jobs.ray_driver")


def worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: one rank of the spec (the process group is Ray Train's)."""
    from airflow_provider_dltrain.jobs import train_entry

    spec = TrainJobSpec.from_json(config["spec"])
    if train_entry.run(spec) != 0:
        rank = os.environ.get("RANK", "?")
        raise RuntimeError(f"rank {rank} failed; its traceback is under {spec.run_dir}/errors")


def run(spec: TrainJobSpec) -> int:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from airflow_provider_dltrain.engines.ray_jobs import OPTIONS_ENV

    options = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    use_gpu = bool(options.get("use_gpu"))
    log.info(
        "Ray job %s: training %s on %d worker(s) (dag %s, run %s, task %s, try %s)",
        spec.identity.job_name,
        spec.train_fn,
        spec.world_size,
        spec.identity.dag_id,
        spec.identity.run_id,
        spec.identity.task_id,
        spec.identity.try_number,
    )
    trainer = TorchTrainer(
        worker,
        train_loop_config={"spec": spec.to_json()},
        scaling_config=ScalingConfig(
            num_workers=spec.world_size,
            use_gpu=use_gpu,
            resources_per_worker=options.get("resources_per_worker") or None,
            placement_strategy=options.get("placement_strategy") or "PACK",
        ),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo", timeout_s=int(spec.timeout_s)),
        run_config=RunConfig(
            name=spec.identity.job_name,
            storage_path=options.get("storage_path") or None,
            # A retry is Airflow's (a new try, a new job): Ray restarting the group, after a failure, a
            # preempted node or a controller error, would train again inside the same MLflow run.
            failure_config=FailureConfig(**_no_restarts(FailureConfig)),  # type: ignore[arg-type]
        ),
    )
    try:
        trainer.fit()
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
        if spec.result_uri and not object_exists(spec.result_uri):
            # rank 0 did not get to write why (killed with its group): say what Ray said
            write_object(spec.result_uri, json.dumps({"error": message[:4000], "user_error": False}).encode())
        print(f"dltrain job failed: {message[:2000]}", file=sys.stderr, flush=True)
        return 1
    log.info("Ray job %s: every worker finished", spec.identity.job_name)
    return 0


def _no_restarts(config: Any) -> dict[str, int]:
    """``FailureConfig`` arguments that turn every restart off: Ray Train V2 also restarts after a
    preempted node and a controller error (limits of their own); V1 knows only ``max_failures``."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    limits = ("max_failures", "max_preemption_failures", "controller_failure_limit")
    return {k: 0 for k in limits if k in known} or {"max_failures": 0}
