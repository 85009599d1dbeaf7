"""The instances of a per-run EC2 cluster: their ``RunInstances`` request, finding them by tag,
summarising them, terminating them (the reaper's side too)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_provider_dltrain.engines.ec2_plan import NodePlan, render_user_data
from airflow_provider_dltrain.engines.resources import Clients, Resource, identity_of

LIVE = ["pending", "running", "stopping", "stopped"]
JOB_TAG, RANK_TAG, MANAGED_TAG = "dltrain:job", "dltrain:node_rank", "dltrain:managed"


def terminate_job(ec2: Any, job: str) -> list[str]:
    """Terminate every live instance tagged with ``job``; the ids it terminated."""
    return terminate_tagged(ec2, {JOB_TAG: job})


def terminate_tagged(ec2: Any, tags: Mapping[str, str]) -> list[str]:
    """Terminate every live instance carrying all of ``tags``; the ids it terminated."""
    ids = [i["id"] for i in tagged(ec2, tags)]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def described(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every instance ``DescribeInstances`` returns for ``filters``, all pages."""
    pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])]


def tagged(ec2: Any, tags: Mapping[str, str], states: Sequence[str] = LIVE) -> list[dict[str, Any]]:
    """The summaries of the instances in ``states`` carrying all of ``tags``."""
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": list(states)})
    return [instance_summary(i) for i in described(ec2, filters)]


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


def user_data(plan: NodePlan, options: Any, public_key: str | None = None) -> str:
    """The user data of one node: its plan under the options' Python, setup lines and dead-man switch
    (``options``: an ``Ec2Options``)."""
    return render_user_data(
        plan,
        max_minutes=options.max_minutes,
        python=options.python,
        setup_commands=options.setup_commands,
        ssh_public_key=public_key,
    )


def run_instances_request(
    plan: NodePlan, options: Any, identity_tags: Mapping[str, str], image: str, public_key: str | None
) -> dict[str, Any]:
    """The ``RunInstances`` request of one node, tagged with its task's identity, job and rank."""
    tags = {**identity_tags, JOB_TAG: plan.job_name, RANK_TAG: str(plan.node_rank)}
    tags.update({MANAGED_TAG: "true", "Name": f"{plan.job_name}-{plan.node_rank}"})
    tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
    request: dict[str, Any] = {
        **options.run_instances,
        "ImageId": image,
        "InstanceType": options.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": user_data(plan, options, public_key),
        "InstanceInitiatedShutdownBehavior": "terminate",
        "ClientToken": f"{plan.job_name}-{plan.node_rank}"[:64],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tag_list},
            {"ResourceType": "volume", "Tags": tag_list},
        ],
    }
    if options.instance_profile:
        key = "Arn" if options.instance_profile.startswith("arn:") else "Name"
        request["IamInstanceProfile"] = {key: options.instance_profile}
    if options.subnet_id:
        request["SubnetId"] = options.subnet_id
    if options.security_group_ids:
        request["SecurityGroupIds"] = list(options.security_group_ids)
    if options.key_name:
        request["KeyName"] = options.key_name
    return request


# -- for the reaper ---------------------------------------------------------------------------------
RESOURCE_KIND, STOP_VERB = "ec2_instance", "terminate"


def live_resources(clients: Clients) -> Iterator[Resource]:
    """Every live instance of a per-run cluster (tagged with its task's identity)."""
    filters = [
        {"Name": "tag-key", "Values": ["dltrain:run_id"]},
        {"Name": "instance-state-name", "Values": LIVE},
    ]
    for instance in described(clients("ec2"), filters):
        identity = identity_of(instance.get("Tags"))
        if identity is None:
            continue
        yield Resource(
            RESOURCE_KIND,
            instance["InstanceId"],
            identity,
            instance["State"]["Name"],
            instance.get("LaunchTime"),
            {"instance_id": instance["InstanceId"]},
        )


def stop_resource(clients: Clients, res: Resource) -> None:
    clients("ec2").terminate_instances(InstanceIds=[res.ids["instance_id"]])
