"""Create the compose deployment's buckets on the S3 store (idempotent): ``create_buckets.py NAME...``."""

from __future__ import annotations

import os
import sys
import time

import boto3
from botocore.exceptions import ClientError, EndpointConnectionError


def main(names: list[str]) -> int:
    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"])
    for attempt in range(60):  # the store may still be starting
        try:
            existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
            break
        except (EndpointConnectionError, ClientError):
            if attempt == 59:
                raise
            time.sleep(2)
    for name in names:
        if name not in existing:
            s3.create_bucket(Bucket=name)
            print(f"created bucket {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
