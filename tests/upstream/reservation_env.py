"""What the ports of upstream's capacity reservation suites share: the simulated AWS (boto3 over
HTTP) as the EC2 API, with its reservations reset around each test, and the policies of the
seed with capacityReservationSelectorTerms."""

from __future__ import annotations

import boto3
import pytest

from provisioning.services import cloud as cloud_service
from provisioning.services import connections
from provisioning.services.policy import apply_manifest

CLUSTER = "karpweb-reservation-ports"
DISCOVERY = {"karpenter.sh/discovery": "test"}


@pytest.fixture(name="aws")
def aws_fixture(on_simulated_aws, settings, seed_ec2nodeclass, seed_nodepool):
    simulated_aws = on_simulated_aws
    settings.KARPWEB_CLUSTER_NAME = CLUSTER
    simulated_aws.delete_capacity_reservations()
    seed_ec2nodeclass["spec"]["capacityReservationSelectorTerms"] = [{"tags": DISCOVERY}]
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")
    yield simulated_aws
    simulated_aws.delete_capacity_reservations()
    connections.reset()
    cloud_service.get_cloud.cache_clear()


def ec2(sim):
    return boto3.client("ec2", **sim.client_kwargs())


def launch_into(sim, reservation_id: str, instance_type: str = "m5.large", zone: str = "us-east-1a") -> str:
    """An instance of this cluster (tagged as karpweb tags its own) in the reservation."""
    client = ec2(sim)
    subnet = client.describe_subnets(
        Filters=[
            {"Name": "tag:karpenter.sh/discovery", "Values": ["my-cluster"]},
            {"Name": "availability-zone", "Values": [zone]},
        ]
    )["Subnets"][0]["SubnetId"]
    image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [
        {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
        {"Key": "karpenter.sh/nodepool", "Value": "general"},
    ]
    answer = client.run_instances(
        ImageId=image,
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": reservation_id}},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return answer["Instances"][0]["InstanceId"]
