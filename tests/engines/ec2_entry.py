"""A stand-in job entry for EC2 engine tests: an all-reduce over every rank its launcher started.

Run as ``<script> --spec s3://…/spec.json --code …`` like the real entry. Under ``torchrun`` the ranks
meet in torch's gloo process group; under ``horovodrun`` (Gloo or MPI controller) in Horovod's.
``hparams.sleep`` makes it hang (kill tests), ``hparams.fail`` makes rank 0 raise (failure tests);
otherwise rank 0 writes ``{"world": W, "sum": 1+…+W, "node": …, "hosts": [...], "controller": …}``
to the spec's result URI, ``hosts`` being the distinct host names the ranks ran on.
"""

import argparse
import json
import os
import socket
import time

import boto3
import torch


def _horovod():
    """(rank, world, sum of rank+1 over all ranks, every rank's host name, controller) under horovodrun."""
    import horovod.torch as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    hosts = hvd.allgather_object(socket.gethostname())
    controller = "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "?"
    return hvd.rank(), hvd.size(), float(total.item()), hosts, controller, hvd.shutdown


def _torch():
    """The same under torchrun, in a gloo process group."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return (
        dist.get_rank(),
        dist.get_world_size(),
        float(value.item()),
        hosts,
        "torch",
        dist.destroy_process_group,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec")
    args, _ = parser.parse_known_args()
    bucket, _, key = args.spec.split("://", 1)[1].partition("/")
    s3 = boto3.client("s3")
    spec = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    params = spec["hparams"]
    under_horovod = "HOROVOD_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ
    rank, world, total, hosts, controller, close = _horovod() if under_horovod else _torch()
    time.sleep(float(params.get("sleep", 0)))
    if params.get("fail") and rank == 0:
        raise ValueError(f"the training step refused the batch: {params['fail']}")
    if rank == 0:
        bucket, _, key = spec["result_uri"].split("://", 1)[1].partition("/")
        result = {
            "world": world,
            "sum": total,
            "node": os.environ.get("GROUP_RANK"),
            "hosts": sorted(set(hosts)),
            "controller": controller,
        }
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(result).encode())
    close()


if __name__ == "__main__":
    main()
