"""The instances of a per-run EC2 cluster: finding them by tag, summarising them, terminating them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIVE = ["pending", "running", "stopping", "stopped"]
JOB_TAG, RANK_TAG, MANAGED_TAG = "dltrain:job", "dltrain:node_rank", "dltrain:managed"


def terminate_job(ec2: Any, job: str) -> list[str]:
    """Terminate every live instance tagged with ``job``; the ids it terminated."""
    return terminate_tagged(ec2, {JOB_TAG: job})


def terminate_tagged(ec2: Any, tags: Mapping[str, str]) -> list[str]:
    """Terminate every live instance carrying all of ``tags``; the ids it terminated."""
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": LIVE})
    pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
    ids = [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def instance_summary(instance: Mapping[str, Any]) -> dict[str, Any]:
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    return {
        "id": instance["InstanceId"],
        "ip": instance.get("PrivateIpAddress"),
        "rank": tags.get(RANK_TAG, "0"),
        "job": tags.get(JOB_TAG, ""),
        "state": instance["State"]["Name"],
        "reason": (instance.get("StateReason") or {}).get("Message")
        or instance.get("StateTransitionReason", ""),
        "tags": tags,
    }
