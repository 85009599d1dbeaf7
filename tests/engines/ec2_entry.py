"""A stand-in job entry for EC2 engine tests: a gloo all-reduce over every rank torchrun started.

Run as ``<script> --spec s3://…/spec.json --code …`` like the real entry. ``params.sleep`` makes it
hang (kill tests), ``params.fail`` makes rank 0 raise (failure tests); otherwise rank 0 writes
``{"world": W, "sum": 1+…+W}`` to the spec's result URI.
"""

import argparse
import json
import os
import time

import boto3
import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec")
    args, _ = parser.parse_known_args()
    bucket, _, key = args.spec.split("://", 1)[1].partition("/")
    s3 = boto3.client("s3")
    spec = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    params = spec["params"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    time.sleep(float(params.get("sleep", 0)))
    if params.get("fail") and rank == 0:
        raise ValueError(f"the training step refused the batch: {params['fail']}")
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    if rank == 0:
        bucket, _, key = spec["result_uri"].split("://", 1)[1].partition("/")
        result = {"world": world, "sum": float(value.item()), "node": os.environ.get("GROUP_RANK")}
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(result).encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
