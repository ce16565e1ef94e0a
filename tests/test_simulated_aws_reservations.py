"""The simulated AWS's capacity reservations: created on its control endpoint, described with
DescribeCapacityReservations, filled by RunInstances and CreateFleet that target them, and
given back when their instances end. boto3 over HTTP, no patching."""

from __future__ import annotations

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

ONE_ATTEMPT = Config(retries={"total_max_attempts": 1})
DISCOVERY = [{"Name": "tag:karpenter.sh/discovery", "Values": ["my-cluster"]}]


@pytest.fixture
def ec2(simulated_aws):
    return boto3.client("ec2", config=ONE_ATTEMPT, **simulated_aws.client_kwargs())


@pytest.fixture
def reservations(simulated_aws):
    simulated_aws.delete_capacity_reservations()
    yield simulated_aws.create_capacity_reservation
    simulated_aws.delete_capacity_reservations()


@pytest.fixture(scope="module")
def subnets(simulated_aws) -> dict[str, str]:
    ec2 = boto3.client("ec2", **simulated_aws.client_kwargs())
    return {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets(Filters=DISCOVERY)["Subnets"]}


@pytest.fixture(scope="module")
def image_id(simulated_aws) -> str:
    ssm = boto3.client("ssm", **simulated_aws.client_kwargs())
    name = "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
    return ssm.get_parameter(Name=name)["Parameter"]["Value"]


def target(reservation_id: str) -> dict:
    return {"CapacityReservationTarget": {"CapacityReservationId": reservation_id}}


def test_describe_capacity_reservations_answers_what_was_created(ec2, reservations):
    made = reservations(
        instanceType="g5.xlarge",
        availabilityZone="us-east-1a",
        count=2,
        tags={"team": "ml"},
        id="cr-0123456789abcdef0",
    )
    block = reservations(
        instanceType="p5.48xlarge",
        availabilityZone="us-east-1b",
        count=1,
        reservationType="capacity-block",
        endTime="2030-01-01T00:00:00Z",
    )
    assert made["availableInstanceCount"] == 2
    [found] = ec2.describe_capacity_reservations(CapacityReservationIds=["cr-0123456789abcdef0"])[
        "CapacityReservations"
    ]
    assert found["InstanceType"] == "g5.xlarge"
    assert found["AvailabilityZone"] == "us-east-1a"
    assert found["AvailableInstanceCount"] == 2
    assert found["TotalInstanceCount"] == 2
    assert found["State"] == "active"
    assert found["InstanceMatchCriteria"] == "targeted"
    assert found["ReservationType"] == "default"
    assert found["Interruptible"] is False
    assert found["Tags"] == [{"Key": "team", "Value": "ml"}]
    by_tag = ec2.describe_capacity_reservations(Filters=[{"Name": "tag:team", "Values": ["ml"]}])
    assert [r["CapacityReservationId"] for r in by_tag["CapacityReservations"]] == ["cr-0123456789abcdef0"]
    [cb] = ec2.describe_capacity_reservations(Filters=[{"Name": "instance-type", "Values": ["p5.48xlarge"]}])[
        "CapacityReservations"
    ]
    assert cb["CapacityReservationId"] == block["id"]
    assert cb["ReservationType"] == "capacity-block"
    assert cb["EndDate"].year == 2030


def test_run_instances_fills_a_reservation_then_is_refused_as_ec2_refuses(ec2, reservations, subnets, image_id):
    made = reservations(instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1)
    launch = dict(ImageId=image_id, InstanceType="g5.xlarge", MinCount=1, MaxCount=1, SubnetId=subnets["us-east-1a"])
    instance = ec2.run_instances(CapacityReservationSpecification=target(made["id"]), **launch)["Instances"][0]
    [found] = ec2.describe_capacity_reservations(CapacityReservationIds=[made["id"]])["CapacityReservations"]
    assert found["AvailableInstanceCount"] == 0
    described = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0]
    assert described["CapacityReservationId"] == made["id"]

    with pytest.raises(ClientError) as raised:
        ec2.run_instances(CapacityReservationSpecification=target(made["id"]), **launch)
    assert raised.value.response["Error"]["Code"] == "ReservationCapacityExceeded"

    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    [found] = ec2.describe_capacity_reservations(CapacityReservationIds=[made["id"]])["CapacityReservations"]
    assert found["AvailableInstanceCount"] == 1


def test_a_launch_into_a_reservation_of_another_type_or_zone_is_refused(ec2, reservations, subnets, image_id):
    made = reservations(instanceType="g5.xlarge", availabilityZone="us-east-1a", count=1)
    with pytest.raises(ClientError, match="does not match"):
        ec2.run_instances(
            ImageId=image_id,
            InstanceType="g5.xlarge",
            MinCount=1,
            MaxCount=1,
            SubnetId=subnets["us-east-1b"],
            CapacityReservationSpecification=target(made["id"]),
        )


def test_create_fleet_fills_the_reservation_its_launch_template_targets(ec2, reservations, subnets, image_id):
    made = reservations(instanceType="g5.xlarge", availabilityZone="us-east-1a", count=2)
    name = f"karpweb-test-{made['id']}"
    ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"ImageId": image_id, "CapacityReservationSpecification": target(made["id"])},
    )
    result = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 3, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"},
                "Overrides": [
                    {"InstanceType": "g5.xlarge", "SubnetId": subnets["us-east-1a"], "AvailabilityZone": "us-east-1a"}
                ],
            }
        ],
    )
    launched = [i for item in result["Instances"] for i in item["InstanceIds"]]
    assert len(launched) == 2
    assert [e["ErrorCode"] for e in result["Errors"]] == ["ReservationCapacityExceeded"]
    [found] = ec2.describe_capacity_reservations(CapacityReservationIds=[made["id"]])["CapacityReservations"]
    assert found["AvailableInstanceCount"] == 0


def test_released_instances_run_on_outside_the_reservation(simulated_aws, ec2, reservations, subnets, image_id):
    made = reservations(instanceType="m5.large", availabilityZone="us-east-1a", count=1)
    instance = ec2.run_instances(
        ImageId=image_id,
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnets["us-east-1a"],
        CapacityReservationSpecification=target(made["id"]),
    )["Instances"][0]
    assert simulated_aws.release_from_reservations([instance["InstanceId"]]) == 1
    described = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0]
    assert "CapacityReservationId" not in described


@pytest.mark.parametrize(
    "payload",
    [
        {"availabilityZone": "us-east-1a", "count": 1},
        {"instanceType": "m5.large", "availabilityZone": "us-east-1a", "count": 0},
        {"instanceType": "m5.large", "availabilityZone": "us-east-1a", "count": 1, "id": "r-1"},
        {"instanceType": "m5.large", "availabilityZone": "us-east-1a", "count": 1, "reservationType": "capacity-block"},
        {"instanceType": "m5.large", "availabilityZone": "us-east-1a", "count": 1, "colour": "red"},
    ],
)
def test_the_control_endpoint_refuses_junk_and_names_the_field(simulated_aws, reservations, payload):
    response = requests.post(f"{simulated_aws.endpoint_url}/_karpweb/capacity-reservations", json=payload, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]


def test_a_capacity_block_launches_as_its_own_market(ec2, reservations, subnets, image_id):
    block = reservations(
        instanceType="p5.48xlarge",
        availabilityZone="us-east-1b",
        count=1,
        reservationType="capacity-block",
        endTime="2099-01-01T00:00:00Z",
    )
    instance = ec2.run_instances(
        ImageId=image_id,
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnets["us-east-1b"],
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification=target(block["id"]),
    )["Instances"][0]
    described = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0]
    assert described["CapacityReservationId"] == block["id"]
