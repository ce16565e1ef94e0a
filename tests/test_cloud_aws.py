"""``cloud/aws.py`` and ``cloud/launch.py`` against the simulated AWS: boto3 speaks HTTP to a
seeded moto server (``simulated_aws``), nothing is patched.

These tests use their own cluster name, so the instances they launch and collect are not
those of other test modules sharing the session's simulated AWS.
"""

from __future__ import annotations

import base64
import json
import tomllib
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from simaws import CallCounter, WorkerDied

from provisioning.cloud.aws import AWSCloud, AWSPrices, to_cloud_error
from provisioning.cloud.base import (
    BatchLaunch,
    CloudError,
    Instance,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    NodeClassNotReady,
    PricingUnavailable,
    ResolvedNodeClass,
    Subnet,
    Throttled,
)
from provisioning.cloud.config import AWSConfig
from provisioning.cloud.errors import error_reason
from provisioning.cloud.launch import backoff_delay, garbage_collect, launch_batch_with_backoff, launch_with_fallback
from provisioning.cloud.launchplan import fleet_failure, fleet_instances, pair_instances
from provisioning.cloud.launchtemplate import block_device_mappings
from provisioning.cloud.pricing import parse_price_list, pricing_api_region
from provisioning.cloud.selectors import alias_parameters
from provisioning.cloud.userdata import NodeBootstrap

CLUSTER = "karpweb-test"
ENDPOINT = "https://0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
SEED = Path(__file__).resolve().parent / "fixtures" / "seed" / "ec2nodeclass.yaml"
CA_BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def sim(simulated_aws):
    """The simulated AWS as boto3's standard environment (endpoint and credentials)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in simulated_aws.env().items():
            mp.setenv(key, value)
        yield simulated_aws


@pytest.fixture(scope="module")
def config(sim) -> AWSConfig:
    return AWSConfig(
        region=sim.region,
        cluster_name=CLUSTER,
        kubernetes_version=sim.kubernetes_version,
        cluster_endpoint=ENDPOINT,
        cluster_ca_bundle=CA_BUNDLE,
        launch_api="fleet",
    )


@pytest.fixture(scope="module")
def cloud(config) -> AWSCloud:
    return AWSCloud(config)


@pytest.fixture(scope="module")
def run_cloud(config) -> AWSCloud:
    return AWSCloud(replace(config, launch_api="run-instances"))


@pytest.fixture(scope="module")
def ec2(sim):
    return boto3.client("ec2", **sim.client_kwargs())


@pytest.fixture(scope="module")
def seed_spec() -> dict:
    return _seed()


@pytest.fixture(scope="module")
def resolved(cloud, seed_spec) -> ResolvedNodeClass:
    return cloud.resolve_nodeclass("default", seed_spec)


@pytest.fixture
def exhaust(sim):
    """Exhaust offerings for one test; capacity comes back afterwards."""
    yield sim.set_insufficient_capacity
    sim.set_insufficient_capacity([])


def option(instance_type: str, zone: str, capacity_type: str = "on-demand", price: float = 0.1) -> LaunchOption:
    return LaunchOption(instance_type, zone, capacity_type, price)


def request_for(
    resolved: ResolvedNodeClass,
    spec: dict,
    options: tuple[LaunchOption, ...],
    capacity_type: str = "on-demand",
    name: str | None = None,
    **kwargs,
) -> LaunchRequest:
    name = name or f"default-{uuid.uuid4().hex[:5]}"
    return LaunchRequest(
        nodeclaim_name=name,
        nodeclaim_uid=str(uuid.uuid4()),
        nodepool="default",
        nodeclass_spec=spec,
        nodeclass=resolved,
        options=options,
        capacity_type=capacity_type,
        **kwargs,
    )


def instances_of(ec2, nodeclaim: str) -> list[dict]:
    found = ec2.describe_instances(Filters=[{"Name": "tag:karpenter.sh/nodeclaim", "Values": [nodeclaim]}])
    return [i for r in found["Reservations"] for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def user_data_of(ec2, template_name: str) -> str:
    versions = ec2.describe_launch_template_versions(LaunchTemplateName=template_name)["LaunchTemplateVersions"]
    return base64.b64decode(versions[0]["LaunchTemplateData"]["UserData"]).decode()


# ------------------------------------------------------------------ catalog inputs


def test_instance_types_zones_and_zone_ids(cloud):
    infos = cloud.instance_type_infos()
    names = {i["InstanceType"] for i in infos}
    assert len(infos) > 500
    assert "m5.large" in names and "m6g.large" in names
    assert all("hvm" in i["SupportedVirtualizationTypes"] for i in infos)
    assert all({"x86_64", "arm64"} & set(i["ProcessorInfo"]["SupportedArchitectures"]) for i in infos), (
        "only x86_64 and arm64 types"
    )

    zones = cloud.instance_type_zones()
    assert "us-east-1a" in zones["m5.large"]
    zone_ids = cloud.zone_ids()
    assert zone_ids["us-east-1a"].startswith("use1-az")
    assert set(zones["m5.large"]) <= set(zone_ids)


# ------------------------------------------------------------------ EC2NodeClass resolution


def test_the_seed_nodeclass_resolves(cloud, resolved, sim):
    assert resolved.ready, resolved.problems
    assert resolved.ami_family == "AL2023"
    assert {s.zone for s in resolved.subnets} >= {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(s.zone_id and s.available_ips > 0 for s in resolved.subnets)
    assert [g.name for g in resolved.security_groups] == ["eks-cluster-sg-my-cluster"]
    by_kind = {(i.arch, i.variant): i for i in resolved.images}
    assert {("amd64", "standard"), ("arm64", "standard"), ("amd64", "nvidia"), ("arm64", "nvidia")} <= set(by_kind)
    assert by_kind[("amd64", "standard")].name == "amazon-eks-node-al2023-x86_64-standard-1.33-v20261101"

    # role: an instance profile named from cluster and EC2NodeClass, holding the role.
    assert resolved.instance_profile == cloud.instance_profile_name("default")
    assert resolved.instance_profile.startswith(f"{CLUSTER}_")
    iam = boto3.client("iam", **sim.client_kwargs())
    profile = iam.get_instance_profile(InstanceProfileName=resolved.instance_profile)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["KarpenterNodeRole-my-cluster"]
    assert profile["Path"] == f"/karpenter/us-east-1/{CLUSTER}/default/"
    # Resolving again reuses the profile.
    assert cloud.resolve_nodeclass("default", {**_seed(), "role": "KarpenterNodeRole-my-cluster"}).ready


def _seed() -> dict:
    return yaml.safe_load(SEED.read_text())["spec"]


def test_selectors_that_match_nothing_are_problems(cloud):
    spec = {
        "amiSelectorTerms": [{"id": "ami-0000000000000000f"}],
        "amiFamily": "AL2023",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "nobody"}}],
        "securityGroupSelectorTerms": [{"id": "sg-00000000000000000"}],
        "instanceProfile": "some-profile",
    }
    result = cloud.resolve_nodeclass("empty", spec)
    assert not result.ready
    assert result.problems == (
        "no subnet matches subnetSelectorTerms (tag karpenter.sh/discovery=nobody)",
        "no security group matches securityGroupSelectorTerms (id sg-00000000000000000)",
        "no AMI matches amiSelectorTerms (id ami-0000000000000000f)",
    )
    assert result.instance_profile == "some-profile"


def test_every_selector_form(cloud, resolved, sim):
    subnet = resolved.subnets[0]
    group = resolved.security_groups[0]
    spec = {
        "amiFamily": "AL2023",
        "amiSelectorTerms": [
            {"name": "amazon-eks-node-al2023-arm64-standard-1.33-*", "owner": "amazon"},
            {"tags": {"karpenter.sh/discovery": "*"}, "id": "ami-does-not-exist"},  # ANDed: matches nothing
        ],
        "subnetSelectorTerms": [{"id": subnet.id}],
        "securityGroupSelectorTerms": [{"name": group.name}],
        "instanceProfile": "KarpenterNodeRole-my-cluster",
    }
    result = cloud.resolve_nodeclass("forms", spec)
    assert result.ready, result.problems
    assert [s.id for s in result.subnets] == [subnet.id]
    assert [g.id for g in result.security_groups] == [group.id]
    assert [(i.arch, i.name) for i in result.images] == [
        ("arm64", "amazon-eks-node-al2023-arm64-standard-1.33-v20261101")
    ]

    # '*' is "has the tag key"; an SSM parameter names an AMI; Bottlerocket's alias paths.
    wildcard = cloud.resolve_nodeclass(
        "wild",
        {
            **spec,
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "*"}}],
            "amiSelectorTerms": [{"ssmParameter": "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id"}],
            "amiFamily": "Bottlerocket",
        },
    )
    assert len(wildcard.subnets) >= len(resolved.subnets)
    assert [i.name.startswith("bottlerocket-aws-k8s-1.33-x86_64") for i in wildcard.images] == [True]
    bottlerocket = cloud.resolve_nodeclass(
        "br", {**spec, "amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "amiFamily": "Bottlerocket"}
    )
    assert {(i.arch, i.variant) for i in bottlerocket.images} == {
        ("amd64", "standard"),
        ("arm64", "standard"),
        ("amd64", "nvidia"),
        ("arm64", "nvidia"),
    }
    # AL2 is not published for Kubernetes 1.33: a problem naming the alias.
    al2 = cloud.resolve_nodeclass("al2", {**spec, "amiSelectorTerms": [{"alias": "al2@latest"}], "amiFamily": "AL2"})
    assert al2.problems == ("alias al2@latest: AL2 AMIs are not published for Kubernetes 1.33 (use al2023@latest)",)
    missing = cloud.resolve_nodeclass("gone", {**spec, "amiSelectorTerms": [{"ssmParameter": "/no/such/parameter"}]})
    assert missing.problems == ("no AMI matches amiSelectorTerms (ssmParameter /no/such/parameter does not exist)",)


def test_a_role_iam_refuses_is_a_problem_not_a_crash(cloud, seed_spec):
    result = cloud.resolve_nodeclass("norole", {**seed_spec, "role": "NoSuchRole"})
    assert not result.ready
    assert result.problems == ("role NoSuchRole does not exist in IAM",)
    assert result.instance_profile == ""


def test_alias_parameter_paths():
    paths, problem = alias_parameters("al2023@v20240625", "1.31")
    assert not problem
    assert (
        "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/"
        "amazon-eks-node-al2023-arm64-standard-1.31-v20240625/image_id",
        "arm64",
        "standard",
    ) in paths
    paths, _ = alias_parameters("bottlerocket@v1.10.0", "1.31")
    assert paths[0][0] == "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.10.0/image_id"
    paths, _ = alias_parameters("al2@latest", "1.30")
    assert [p for p, _, _ in paths] == [
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id",
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id",
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/recommended/image_id",
    ]
    paths, _ = alias_parameters("windows2022@latest", "1.33")
    assert paths == [
        (
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.33/image_id",
            "x86_64",
            "standard",
        )
    ]


# ------------------------------------------------------------------ launch


def test_launch_via_fleet_on_demand_picks_the_cheapest_and_tags_everything(cloud, resolved, seed_spec, ec2):
    spec = {**seed_spec, "tags": {"team": "platform", "Name": "custom-name-is-kept"}}
    options = (
        option("m5.large", "us-east-1a", price=0.096),
        option("c5.large", "us-east-1b", price=0.085),
        option("m5.large", "us-east-1a", "spot", price=0.04),  # not this capacity type
    )
    request = request_for(resolved, spec, options, labels={"team": "platform", "kubernetes.io/arch": "amd64"})
    instance = cloud.launch(request)

    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("c5.large", "us-east-1b", "on-demand")
    assert instance.provider_id == f"aws:///us-east-1b/{instance.id}"
    expected = {
        "karpenter.sh/nodepool": "default",
        "karpenter.sh/nodeclaim": request.nodeclaim_name,
        "karpenter.k8s.aws/ec2nodeclass": "default",
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:eks-cluster-name": CLUSTER,
        "team": "platform",
        "Name": "custom-name-is-kept",
    }
    raw = instances_of(ec2, request.nodeclaim_name)
    assert len(raw) == 1
    tags = {t["Key"]: t["Value"] for t in raw[0]["Tags"]}
    assert expected.items() <= tags.items()
    assert expected.items() <= instance.tags.items()

    fleet = next(
        f
        for f in ec2.describe_fleets()["Fleets"]
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get("karpenter.sh/nodeclaim") == request.nodeclaim_name
    )
    assert fleet["Type"] == "instant"
    assert fleet["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"}
    assert fleet["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert expected.items() <= {t["Key"]: t["Value"] for t in fleet["Tags"]}.items()
    (config,) = fleet["LaunchTemplateConfigs"]
    overrides = config["Overrides"]
    assert [(o["InstanceType"], o["AvailabilityZone"], o["Priority"]) for o in overrides] == [
        ("c5.large", "us-east-1b", 0.085),
        ("m5.large", "us-east-1a", 0.096),
    ]
    subnet_b = next(s.id for s in resolved.subnets if s.zone == "us-east-1b")
    assert overrides[0]["SubnetId"] == subnet_b

    # The user data of the template: a nodeadm NodeConfig in MIME with labels and taints.
    user_data = user_data_of(ec2, config["LaunchTemplateSpecification"]["LaunchTemplateName"])
    assert user_data.startswith("MIME-Version: 1.0\nContent-Type: multipart/mixed;")
    node_config = yaml.safe_load(user_data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("--//")[0])
    assert node_config["spec"]["cluster"] == {
        "name": CLUSTER,
        "apiServerEndpoint": ENDPOINT,
        "certificateAuthority": CA_BUNDLE,
    }
    flags = node_config["spec"]["kubelet"]["flags"]
    assert flags == [
        '--node-labels="karpenter.k8s.aws/ec2nodeclass=default,karpenter.sh/capacity-type=on-demand,'
        'karpenter.sh/do-not-sync-taints=true,karpenter.sh/nodepool=default,team=platform"',
        "--register-with-taints=karpenter.sh/unregistered:NoExecute",
    ]

    # Volume tags: moto creates fleet instances' volumes untagged (and ignores the template's
    # block devices); test_launch_via_run_instances checks the volume tags.


def test_launch_via_fleet_spot(cloud, resolved, seed_spec, ec2):
    options = (option("m5.large", "us-east-1c", "spot", 0.04), option("m5.large", "us-east-1c", price=0.096))
    instance = cloud.launch(request_for(resolved, seed_spec, options, capacity_type="spot"))
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("m5.large", "us-east-1c", "spot")
    raw = ec2.describe_instances(InstanceIds=[instance.id])["Reservations"][0]["Instances"][0]
    assert raw["InstanceLifecycle"] == "spot"


def test_fleet_overrides_are_capped_at_60_instance_types_cheapest_first(cloud, resolved, seed_spec, ec2):
    zones = cloud.instance_type_zones()
    families = ("m5", "c5", "r5", "m6i", "c6i", "r6i")
    types = sorted(t for t, z in zones.items() if "us-east-1a" in z and t.startswith(families) and "metal" not in t)
    options = tuple(
        option(t, zone, price=round(0.01 * (i + 1), 4)) for i, t in enumerate(types[:70]) for zone in ("us-east-1a",)
    )
    assert len({o.instance_type for o in options}) == 70
    request = request_for(resolved, seed_spec, tuple(reversed(options)))
    cloud.launch(request)
    fleet = next(
        f
        for f in ec2.describe_fleets()["Fleets"]
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get("karpenter.sh/nodeclaim") == request.nodeclaim_name
    )
    overrides = [o for c in fleet["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert len(overrides) == 60
    assert sorted(o["Priority"] for o in overrides) == [o.price for o in options[:60]]


def test_launch_via_run_instances(run_cloud, resolved, seed_spec, ec2):
    options = (option("m5.large", "us-east-1a", "spot", 0.04), option("m6g.large", "us-east-1b", "spot", 0.03))
    request = request_for(resolved, seed_spec, options, capacity_type="spot")
    instance = run_cloud.launch(request)
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("m6g.large", "us-east-1b", "spot")
    raw = instances_of(ec2, request.nodeclaim_name)[0]
    assert raw["InstanceLifecycle"] == "spot"
    assert raw["ImageId"] == next(i.id for i in resolved.images if (i.arch, i.variant) == ("arm64", "standard"))
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags["Name"] == request.nodeclaim_name
    assert tags["aws:ec2launchtemplate:id"].startswith("lt-")
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [instance.id]}])["Volumes"]
    assert {t["Key"]: t["Value"] for t in volumes[0]["Tags"]}["karpenter.sh/nodeclaim"] == request.nodeclaim_name

    on_demand = run_cloud.launch(request_for(resolved, seed_spec, (option("c5.large", "us-east-1c"),)))
    assert (on_demand.instance_type, on_demand.zone, on_demand.capacity_type) == ("c5.large", "us-east-1c", "on-demand")


@pytest.mark.parametrize("api", ["fleet", "run-instances"])
def test_the_same_nodeclaim_uid_launches_one_instance(api, cloud, run_cloud, resolved, seed_spec, ec2):
    provider = cloud if api == "fleet" else run_cloud
    request = request_for(resolved, seed_spec, (option("t3.medium", "us-east-1a"), option("t3.medium", "us-east-1b")))
    first = provider.launch(request)
    again = provider.launch(request)
    assert again.id == first.id
    assert [i["InstanceId"] for i in instances_of(ec2, request.nodeclaim_name)] == [first.id]
    # A retried task builds a new request for the same NodeClaim: still the same instance.
    retried = provider.launch(replace(request, options=(option("t3.large", "us-east-1c"),)))
    assert retried.id == first.id


@pytest.mark.parametrize("api", ["fleet", "run-instances"])
def test_a_uid_reused_with_other_offerings_still_launches(api, cloud, run_cloud, resolved, seed_spec, ec2):
    """EC2 refuses a client token reused with other parameters (IdempotentParameterMismatch);
    once the first instance is gone, the NodeClaim's next launch uses a derived token."""
    provider = cloud if api == "fleet" else run_cloud
    request = request_for(resolved, seed_spec, (option("t3.small", "us-east-1a"),))
    first = provider.launch(request)
    provider.terminate(first.id)
    second = provider.launch(replace(request, options=(option("t3.small", "us-east-1b"),)))
    assert second.id != first.id and second.zone == "us-east-1b"
    assert [i["InstanceId"] for i in instances_of(ec2, request.nodeclaim_name)] == [second.id]


def test_launch_templates_are_reused_until_their_content_changes(cloud, resolved, seed_spec, ec2):
    image = next(i for i in resolved.images if (i.arch, i.variant) == ("amd64", "standard"))
    request = request_for(resolved, seed_spec, (option("m5.large", "us-east-1a"),))
    name = cloud.launch_template_for(request, image)
    assert name.startswith("karpweb/")
    # Another worker (no shared cache) for another NodeClaim of the same NodePool: same template.
    other = AWSCloud(cloud.config)
    assert other.launch_template_for(request_for(resolved, seed_spec, request.options), image) == name
    assert len(ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]) == 1

    changed = {**seed_spec, "userData": "#!/bin/bash\necho hello from the user\n", "kubelet": {"maxPods": 42}}
    changed_name = cloud.launch_template_for(request_for(resolved, changed, request.options), image)
    assert changed_name != name
    user_data = user_data_of(ec2, changed_name)
    # The user's script first, then the NodeConfig with maxPods.
    assert user_data.index("echo hello from the user") < user_data.index("application/node.eks.aws")
    node_config = yaml.safe_load(user_data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("--//")[0])
    assert node_config["spec"]["kubelet"]["config"]["maxPods"] == 42

    data = ec2.describe_launch_template_versions(LaunchTemplateName=changed_name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["ImageId"] == image.id
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
        "InstanceMetadataTags": "disabled",
    }
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 20}}
    ]
    assert data["IamInstanceProfile"] == {"Name": resolved.instance_profile}
    assert data["SecurityGroupIds"] == [g.id for g in resolved.security_groups]

    # Workers racing to create one new template (no shared cache): all get it, one exists.
    racing = {**seed_spec, "userData": f"#!/bin/bash\necho {uuid.uuid4()}\n"}
    racers = [AWSCloud(cloud.config) for _ in range(6)]
    with ThreadPoolExecutor(len(racers)) as pool:
        names = list(
            pool.map(lambda c: c.launch_template_for(request_for(resolved, racing, request.options), image), racers)
        )
    assert len(set(names)) == 1
    assert len(ec2.describe_launch_templates(LaunchTemplateNames=names[:1])["LaunchTemplates"]) == 1


# ------------------------------------------------------------------ insufficient capacity


def test_fleet_skips_an_exhausted_offering_and_reports_it_when_nothing_is_left(cloud, resolved, seed_spec, exhaust):
    exhaust(["on-demand:m5.large:us-east-1a"])
    options = (option("m5.large", "us-east-1a", price=0.096), option("m5.large", "us-east-1b", price=0.097))
    instance = cloud.launch(request_for(resolved, seed_spec, options))
    assert (instance.instance_type, instance.zone) == ("m5.large", "us-east-1b")

    with pytest.raises(InsufficientCapacity) as caught:
        cloud.launch(request_for(resolved, seed_spec, options[:1]))
    assert caught.value.unavailable == options[:1]
    assert caught.value.reason == "InsufficientCapacity"
    assert "m5.large in us-east-1a" in str(caught.value)


def test_run_instances_tries_the_next_offering(run_cloud, resolved, seed_spec, exhaust):
    exhaust(["spot:m5.large:us-east-1a"])
    options = (option("m5.large", "us-east-1a", "spot", 0.04), option("m5.large", "us-east-1b", "spot", 0.041))
    instance = run_cloud.launch(request_for(resolved, seed_spec, options, capacity_type="spot"))
    assert (instance.zone, instance.capacity_type) == ("us-east-1b", "spot")


@pytest.mark.parametrize("api", ["fleet", "run-instances"])
def test_spot_falls_back_to_on_demand_when_every_spot_offering_is_exhausted(
    api, cloud, run_cloud, resolved, seed_spec, exhaust
):
    exhaust(["spot:m5.large:*", "spot:c5.large:us-east-1a"])
    options = (
        option("c5.large", "us-east-1a", "spot", 0.03),
        option("m5.large", "us-east-1a", "spot", 0.04),
        option("m5.large", "us-east-1b", "spot", 0.041),
        option("m5.large", "us-east-1a", "on-demand", 0.096),
    )
    unavailable: dict[str, LaunchOption] = {}

    def key(o: LaunchOption) -> str:
        return f"{o.capacity_type}:{o.instance_type}:{o.zone}"

    provider = cloud if api == "fleet" else run_cloud
    instance = launch_with_fallback(
        provider,
        request_for(resolved, seed_spec, options, capacity_type="spot"),
        mark_unavailable=lambda o: unavailable.setdefault(key(o), o),
        is_unavailable=lambda o: key(o) in unavailable,
    )
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("m5.large", "us-east-1a", "on-demand")
    assert sorted(unavailable) == ["spot:c5.large:us-east-1a", "spot:m5.large:us-east-1a", "spot:m5.large:us-east-1b"]


def test_everything_exhausted_raises_with_every_offering(cloud, resolved, seed_spec, exhaust):
    exhaust(["spot:m5.large:*", "on-demand:m5.large:*"])
    options = (option("m5.large", "us-east-1a", "spot", 0.04), option("m5.large", "us-east-1b", "on-demand", 0.09))
    marked: list[LaunchOption] = []
    with pytest.raises(InsufficientCapacity) as caught:
        launch_with_fallback(
            cloud,
            request_for(resolved, seed_spec, options, capacity_type="spot"),
            mark_unavailable=marked.append,
            is_unavailable=lambda o: o in marked,
        )
    assert set(caught.value.unavailable) == set(options) == set(marked)
    assert "every spot, on-demand offering is exhausted" in str(caught.value)


# ------------------------------------------------------------------ a batch: one fleet for several NodeClaims


@pytest.fixture
def batch_cloud(config):
    """A cloud of its own, whose EC2 calls are counted."""
    cloud = AWSCloud(config)
    cloud.calls = CallCounter(cloud.ec2)
    yield cloud
    cloud.calls.close()


def batch_for(resolved, spec, options, capacity_type="on-demand", **kwargs) -> LaunchRequest:
    """A batch's request: named by its token, which is also its ClientToken."""
    token = f"fleet-{uuid.uuid4().hex}"
    request = request_for(resolved, spec, options, capacity_type, name=token, **kwargs)
    return replace(request, nodeclaim_uid=token)


def test_a_batch_of_five_is_one_fleet_and_each_instance_is_tagged_with_its_own_claim(
    batch_cloud, resolved, seed_spec, ec2
):
    spec = {**seed_spec, "tags": {"team": "platform"}}
    options = (option("c5.large", "us-east-1b", price=0.085), option("m5.large", "us-east-1a", price=0.096))
    request = batch_for(resolved, spec, options, first_attempt=True)
    names = tuple(f"default-batch{i}-{uuid.uuid4().hex[:4]}" for i in range(5))
    result = batch_cloud.launch_batch(request, names)

    assert batch_cloud.calls.calls["CreateFleet"] == 1
    assert batch_cloud.calls.calls["CreateTags"] == 5
    assert "DescribeInstances" not in batch_cloud.calls.calls  # a first attempt looks for nothing
    assert result.shortfall is None and sorted(result.instances) == sorted(names)
    assert len({i.id for i in result.instances.values()}) == 5
    for name, instance in result.instances.items():
        (raw,) = instances_of(ec2, name)
        assert raw["InstanceId"] == instance.id
        assert (raw["InstanceType"], raw["Placement"]["AvailabilityZone"]) == ("c5.large", "us-east-1b")
        tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
        assert tags["karpenter.sh/nodeclaim"] == name and tags["Name"] == name
        assert tags["karpweb/launch-batch"] == request.nodeclaim_uid
        assert tags["team"] == "platform" and tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
        assert instance.tags["karpenter.sh/nodeclaim"] == name

    (fleet,) = [
        f
        for f in ec2.describe_fleets()["Fleets"]
        if {t["Key"]: t["Value"] for t in f.get("Tags", [])}.get("karpweb/launch-batch") == request.nodeclaim_uid
    ]
    assert fleet["Type"] == "instant"
    assert fleet["TargetCapacitySpecification"] == {"TotalTargetCapacity": 5, "DefaultTargetCapacityType": "on-demand"}
    # The fleet's own tags are the batch's: no NodeClaim names one instance of it.
    assert "karpenter.sh/nodeclaim" not in {t["Key"] for t in fleet["Tags"]}


def test_a_fleet_short_of_capacity_fills_some_and_names_what_ran_out(batch_cloud, resolved, seed_spec, exhaust):
    exhaust(["spot:m5.large:us-east-1a=2", "spot:m5.large:us-east-1b"])
    options = (option("m5.large", "us-east-1a", "spot", 0.04), option("m5.large", "us-east-1b", "spot", 0.041))
    names = ("default-short-a", "default-short-b", "default-short-c", "default-short-d")
    result = batch_cloud.launch_batch(batch_for(resolved, seed_spec, options, "spot", first_attempt=True), names)
    assert batch_cloud.calls.calls["CreateFleet"] == 1
    # Paired in name order: the first two NodeClaims got the two instances.
    assert sorted(result.instances) == ["default-short-a", "default-short-b"]
    assert {(i.zone, i.capacity_type) for i in result.instances.values()} == {("us-east-1a", "spot")}
    assert isinstance(result.shortfall, InsufficientCapacity)
    assert set(result.shortfall.unavailable) == set(options)


def test_a_batch_run_again_launches_nothing_more(batch_cloud, resolved, seed_spec, ec2):
    request = batch_for(resolved, seed_spec, (option("t3.medium", "us-east-1c"),), first_attempt=True)
    names = ("default-again-a", "default-again-b", "default-again-c")

    def ids(result) -> dict[str, str]:
        return {name: instance.id for name, instance in result.instances.items()}

    first = ids(batch_cloud.launch_batch(request, names))
    # The same batch as a first attempt again (a redelivered message): the ClientToken replays
    # the fleet's answer (the same instances, tagged again alike).
    assert ids(batch_cloud.launch_batch(request, names)) == first
    assert batch_cloud.calls.calls["CreateFleet"] == 2 and batch_cloud.calls.calls["CreateTags"] == 6
    # As a retry: what was launched is found by the batch tag, already tagged; no call else.
    assert ids(batch_cloud.launch_batch(replace(request, first_attempt=False), names)) == first
    assert batch_cloud.calls.calls["CreateFleet"] == 2 and batch_cloud.calls.calls["CreateTags"] == 6
    tagged = ec2.describe_instances(Filters=[{"Name": "tag:karpweb/launch-batch", "Values": [request.nodeclaim_uid]}])
    assert sorted(i["InstanceId"] for r in tagged["Reservations"] for i in r["Instances"]) == sorted(first.values())


def test_a_batch_interrupted_while_tagging_is_paired_alike_on_retry(batch_cloud, resolved, seed_spec, ec2):
    request = batch_for(resolved, seed_spec, (option("t3.small", "us-east-1d"),), first_attempt=True)
    names = ("default-cut-c", "default-cut-a", "default-cut-b")
    batch_cloud.calls.fail_after["CreateTags"] = 2  # two instances tagged, then the worker is gone
    with pytest.raises(WorkerDied):
        batch_cloud.launch_batch(request, names)
    del batch_cloud.calls.fail_after["CreateTags"]

    result = batch_cloud.launch_batch(replace(request, first_attempt=False), names)
    assert batch_cloud.calls.calls["CreateFleet"] == 1
    tagged = ec2.describe_instances(Filters=[{"Name": "tag:karpweb/launch-batch", "Values": [request.nodeclaim_uid]}])
    launched = sorted(i["InstanceId"] for r in tagged["Reservations"] for i in r["Instances"])
    # Every NodeClaim has one of the three instances, paired as the first attempt paired them.
    assert {name: i.id for name, i in result.instances.items()} == dict(zip(sorted(names), launched, strict=True))
    for name, instance in result.instances.items():
        assert [i["InstanceId"] for i in instances_of(ec2, name)] == [instance.id]


# ------------------------------------------------------------------ errors


def test_launch_errors_become_reasons(cloud, run_cloud, resolved, seed_spec):
    gone = replace(resolved, subnets=(Subnet("subnet-0000000000000000a", "us-east-1a", "use1-az6", 100),))
    for provider in (cloud, run_cloud):
        with pytest.raises(CloudError) as caught:
            provider.launch(request_for(gone, seed_spec, (option("m5.large", "us-east-1a"),)))
        assert caught.value.reason == "SubnetNotFound"
        assert "subnet" in str(caught.value) and "InvalidSubnetID.NotFound" in str(caught.value)

    with pytest.raises(NodeClassNotReady) as caught:
        cloud.launch(request_for(replace(resolved, problems=("no AMI matches amiSelectorTerms (id ami-1)",)), {}, ()))
    assert "no AMI matches" in str(caught.value)

    nowhere = request_for(resolved, seed_spec, (option("m5.large", "us-west-2a"),))
    with pytest.raises(CloudError) as caught:
        cloud.launch(nowhere)
    assert caught.value.reason == "NoCompatibleOffering"
    assert "no subnet in us-west-2a" in str(caught.value)


def _client_error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "CreateFleet")


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        ("UnauthorizedOperation", "You are not authorized to perform this operation.", "Unauthorized"),
        ("InvalidParameterValue", "Value (x) for parameter instanceType is invalid.", "InvalidParameterValue"),
        (
            "InvalidParameterValue",
            "Value (p) for parameter iamInstanceProfile.name is invalid.",
            "InstanceProfileNameInvalid",
        ),
        ("InvalidAMIID.NotFound", "The image id '[ami-1]' does not exist", "AMINotFound"),
        (
            "VcpuLimitExceeded",
            "You have requested more vCPU capacity than your current vCPU limit",
            "VCPULimitExceeded",
        ),
        ("MaxSpotInstanceCountExceeded", "", "SpotQuotaExceeded"),
        ("InstanceLimitExceeded", "", "InstanceLimitExceeded"),
        ("InvalidUserData.Malformed", "User data is limited to 16384 bytes", "UserDataSizeLimitExceeded"),
        ("SomethingNew", "", "LaunchFailed"),
    ],
)
def test_error_codes_map_to_reasons(code, message, reason):
    assert error_reason(code, message)[0] == reason
    error = to_cloud_error(_client_error(code, message), "CreateFleet")
    assert error.reason == reason and not isinstance(error, Throttled)
    assert str(error).startswith("CreateFleet: ") and code in str(error)


def test_throttling_is_its_own_error():
    for code in ("RequestLimitExceeded", "Throttling"):
        assert isinstance(to_cloud_error(_client_error(code), "CreateFleet"), Throttled)


# ------------------------------------------------------------------ lifecycle


def test_terminate_is_idempotent(cloud, resolved, seed_spec, ec2):
    instance = cloud.launch(request_for(resolved, seed_spec, (option("t3.small", "us-east-1a"),)))
    cloud.terminate(instance.id)
    cloud.terminate(instance.id)
    cloud.terminate("i-0123456789abcdef0")
    state = ec2.describe_instances(InstanceIds=[instance.id])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    assert instance.id not in {i.id for i in cloud.list_instances() if i.state != "shutting-down"}


def test_list_and_garbage_collect(cloud, resolved, seed_spec, ec2):
    owned = cloud.launch(request_for(resolved, seed_spec, (option("t3.micro", "us-east-1a"),)))
    leaked = cloud.launch(request_for(resolved, seed_spec, (option("t3.micro", "us-east-1b"),)))
    listed = {i.id: i for i in cloud.list_instances()}
    assert {owned.id, leaked.id} <= set(listed)
    assert all(f"kubernetes.io/cluster/{CLUSTER}" in i.tags for i in listed.values())
    # Everything else in the cluster belongs to some NodeClaim (by provider id, as rows hold it).
    known = {i.provider_id for i in listed.values() if i.id != leaked.id}

    young = leaked.launch_time + timedelta(seconds=10)
    assert garbage_collect(cloud, known, now=young) == []
    assert garbage_collect(cloud, known, now=leaked.launch_time + timedelta(seconds=60)) == [leaked.id]
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=[owned.id, leaked.id])["Reservations"]
        for i in r["Instances"]
    }
    assert states[owned.id] == "running"
    assert states[leaked.id] in ("shutting-down", "terminated")


# ------------------------------------------------------------------ prices


def test_pricing_api_unreachable_raises_pricing_unavailable(config):
    # The simulated AWS has no Price List API (moto has none): callers fall back to the snapshot.
    with pytest.raises(PricingUnavailable):
        AWSPrices(config).on_demand_prices()


def test_spot_prices_from_the_price_history(config):
    prices = AWSPrices(config).spot_prices()
    assert prices[("m5.large", "us-east-1a")] > 0


def test_price_list_parsing_and_regions():
    item = {
        "product": {"attributes": {"instanceType": "m5.large"}},
        "terms": {
            "OnDemand": {
                "X.JRTCKXETXF": {"priceDimensions": {"X.6YS6EN2CT7": {"pricePerUnit": {"USD": "0.0960000000"}}}}
            }
        },
    }
    zero = {
        "product": {"attributes": {"instanceType": "m5.xlarge"}},
        "terms": {"OnDemand": {"t": {"priceDimensions": {"d": {"pricePerUnit": {"USD": "0"}}}}}},
    }
    assert parse_price_list([json.dumps(item), json.dumps(zero)]) == {"m5.large": 0.096}
    assert [pricing_api_region(r) for r in ("ap-southeast-2", "eu-west-1", "cn-north-1", "us-west-2")] == [
        "ap-south-1",
        "eu-central-1",
        "cn-northwest-1",
        "us-east-1",
    ]


# ------------------------------------------------------------------ user data and devices


def _bootstrap(family: str, user_data: str = "", kubelet: dict | None = None) -> NodeBootstrap:
    return NodeBootstrap(
        family=family,
        cluster_name=CLUSTER,
        cluster_endpoint=ENDPOINT,
        cluster_ca_bundle=CA_BUNDLE,
        cluster_cidr="10.100.0.0/16",
        labels=(("karpenter.sh/nodepool", "default"), ("team", "a")),
        taints=(
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        ),
        kubelet=kubelet or {},
        custom_user_data=user_data,
    )


def test_al2023_merges_nodeconfig_yaml_and_mime_user_data():
    yaml_user = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n"
    )
    rendered = _bootstrap("AL2023", yaml_user, {"maxPods": 110, "clusterDNS": ["10.0.100.10"]}).render()
    parts = rendered.split("--//\n")[1:]
    assert parts[0].startswith("Content-Type: application/node.eks.aws\n\napiVersion")  # detected as NodeConfig
    ours = yaml.safe_load(parts[1].split("\n\n", 1)[1].split("--//--")[0])
    assert ours["spec"]["cluster"]["cidr"] == "10.100.0.0/16"
    assert ours["spec"]["kubelet"]["config"] == {"clusterDNS": ["10.0.100.10"], "maxPods": 110}
    assert ours["spec"]["kubelet"]["flags"][1] == (
        "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    )

    mime_user = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="BOUNDARY"\n\n--BOUNDARY\n'
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\necho one\n--BOUNDARY\n'
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\necho two\n--BOUNDARY--\n'
    )
    rendered = _bootstrap("AL2023", mime_user).render()
    assert rendered.count("Content-Type: text/x-shellscript") == 2
    assert rendered.index("echo one") < rendered.index("echo two") < rendered.index("application/node.eks.aws")


def test_bottlerocket_al2_windows_and_custom_user_data():
    user = "[settings.kubernetes]\ncluster-name = 'overridden'\n[settings.host-containers.admin]\nenabled = true\n"
    settings = tomllib.loads(_bootstrap("Bottlerocket", user, {"maxPods": 50}).render())
    kubernetes = settings["settings"]["kubernetes"]
    assert kubernetes["cluster-name"] == CLUSTER  # ours wins
    assert kubernetes["api-server"] == ENDPOINT and kubernetes["max-pods"] == 50
    assert kubernetes["node-labels"] == {"karpenter.sh/nodepool": "default", "team": "a"}
    assert kubernetes["node-taints"] == {"dedicated": ["gpu:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}
    assert settings["settings"]["host-containers"]["admin"]["enabled"] is True  # the user's kept

    al2 = _bootstrap("AL2", "#!/bin/bash\necho custom\n", {"maxPods": 20}).render()
    assert al2.index("echo custom") < al2.index("/etc/eks/bootstrap.sh")
    assert "--use-max-pods false" in al2 and "--max-pods=20" in al2
    assert "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute" in al2

    windows = _bootstrap("Windows2022").render()
    assert windows.startswith("<powershell>") and "Start-EKSBootstrap.ps1" in windows

    assert _bootstrap("Custom", "#!/bin/bash\nexact\n").render() == "#!/bin/bash\nexact\n"


def test_block_device_mappings():
    assert block_device_mappings("Bottlerocket", {}) == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 4}},
        {"DeviceName": "/dev/xvdb", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 20}},
    ]
    assert block_device_mappings("Custom", {}) == []
    spec = {
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "100G", "volumeType": "gp3", "iops": 4000, "kmsKeyID": "k"},
            }
        ]
    }
    # 100 G = 93.13 GiB → 94 GiB (ceil).
    assert block_device_mappings("AL2023", spec) == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Iops": 4000, "KmsKeyId": "k", "VolumeType": "gp3", "VolumeSize": 94}}
    ]


# ------------------------------------------------------------------ launch_with_fallback (pure)


class FakeCloud:
    """A CloudProvider that answers from a script of results, recording each request."""

    region = "us-east-1"

    def __init__(self, *results):
        self.results = list(results)
        self.requests: list[LaunchRequest] = []

    def launch(self, request):
        self.requests.append(request)
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def _instance(capacity_type: str = "on-demand") -> Instance:
    return Instance("i-1", "m5.large", "us-east-1a", capacity_type, "running")


def _plain_request(options, capacity_type="spot") -> LaunchRequest:
    return LaunchRequest("nc", "uid", "default", {}, ResolvedNodeClass("default", "AL2023"), options, capacity_type)


def test_throttling_backs_off_with_jitter_then_gives_up():
    sleeps: list[float] = []
    request = _plain_request((option("m5.large", "us-east-1a", "spot"),))
    cloud = FakeCloud(Throttled("slow down"), Throttled("slow down"), _instance("spot"))
    assert launch_with_fallback(cloud, request, lambda o: None, lambda o: False, sleep=sleeps.append, rng=lambda: 1.0)
    assert sleeps == [0.5, 1.0]  # base × 2^attempt, full jitter at its top

    cloud = FakeCloud(*[Throttled("slow down")] * 5)
    with pytest.raises(Throttled):
        launch_with_fallback(cloud, request, lambda o: None, lambda o: False, sleep=lambda s: None)
    assert len(cloud.requests) == 5
    assert all(0 <= backoff_delay(a) <= 8.0 for a in range(10))


def test_fallback_marks_retries_and_stops_on_other_errors():
    a, b = option("m5.large", "us-east-1a", "spot"), option("m5.large", "us-east-1b", "spot")
    od = option("m5.large", "us-east-1a")
    marked: list[LaunchOption] = []
    cloud = FakeCloud(InsufficientCapacity("ice", (a,)), InsufficientCapacity("ice", (b,)), _instance())
    instance = launch_with_fallback(cloud, _plain_request((a, b, od)), marked.append, lambda o: o in marked)
    assert instance.capacity_type == "on-demand"
    assert marked == [a, b]
    assert [(r.capacity_type, r.options) for r in cloud.requests] == [
        ("spot", (a, b)),
        ("spot", (b,)),
        ("on-demand", (od,)),
    ]

    # An error that names nothing tried still makes progress (no endless retries).
    cloud = FakeCloud(InsufficientCapacity("ice"), _instance())
    assert launch_with_fallback(cloud, _plain_request((a, od)), lambda o: None, lambda o: False)
    assert [r.capacity_type for r in cloud.requests] == ["spot", "on-demand"]

    # On-demand only: no fallback; a non-capacity error is raised at once.
    cloud = FakeCloud(CloudError("denied", reason="Unauthorized"))
    with pytest.raises(CloudError) as caught:
        launch_with_fallback(cloud, _plain_request((a, od)), lambda o: None, lambda o: False)
    assert caught.value.reason == "Unauthorized" and len(cloud.requests) == 1

    # A quota reason survives to the final error.
    quota = InsufficientCapacity("vcpu", (od,))
    quota.reason = "VCPULimitExceeded"
    with pytest.raises(InsufficientCapacity) as caught:
        launch_with_fallback(FakeCloud(quota), _plain_request((od,), "on-demand"), lambda o: None, lambda o: False)
    assert caught.value.reason == "VCPULimitExceeded"


def test_a_batch_retries_throttling_and_then_looks_for_what_it_launched():
    class FakeBatchCloud:
        def __init__(self, *results):
            self.results, self.requests = list(results), []

        def launch_batch(self, request, nodeclaims):
            self.requests.append(request)
            result = self.results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result

    launched = BatchLaunch({"a": _instance()})
    cloud = FakeBatchCloud(Throttled("slow down"), Throttled("slow down"), launched)
    request = replace(_plain_request((option("m5.large", "us-east-1a"),)), first_attempt=True)
    sleeps: list[float] = []
    assert launch_batch_with_backoff(cloud, request, ("a",), sleep=sleeps.append, rng=lambda: 1.0) is launched
    assert sleeps == [0.5, 1.0]
    # A throttled attempt may have launched before it was refused: the next ones look first.
    assert [r.first_attempt for r in cloud.requests] == [True, False, False]

    cloud = FakeBatchCloud(*[Throttled("slow down")] * 5)
    with pytest.raises(Throttled):
        launch_batch_with_backoff(cloud, request, ("a",), sleep=lambda s: None)
    assert len(cloud.requests) == 5


def test_fleet_answers_are_read_per_instance_and_paired_by_name():
    request = _plain_request((option("m5.large", "us-east-1a"),), "on-demand")
    # EC2 lists the instances launched from one override together.
    response = {
        "Instances": [
            {
                "InstanceIds": ["i-2", "i-1"],
                "InstanceType": "m5.large",
                "Lifecycle": "on-demand",
                "LaunchTemplateAndOverrides": {"Overrides": {"AvailabilityZone": "us-east-1a"}},
            },
            {"InstanceIds": ["i-3"], "InstanceType": "m5.xlarge", "Lifecycle": "spot"},
        ]
    }
    instances = fleet_instances(response, request, {"team": "a"})
    assert [(i.id, i.instance_type, i.zone, i.capacity_type) for i in instances] == [
        ("i-2", "m5.large", "us-east-1a", "on-demand"),
        ("i-1", "m5.large", "us-east-1a", "on-demand"),
        ("i-3", "m5.xlarge", "", "spot"),
    ]
    short = fleet_failure(response, request, [], wanted=5)
    assert short.reason == "LaunchFailed" and "launched 3 of 5 instances" in str(short)

    # Tagged instances are their NodeClaim's; untagged ones go to the rest, both sorted.
    tagged = replace(instances[2], tags={"karpenter.sh/nodeclaim": "c"})
    foreign = Instance("i-0", "m5.large", "us-east-1a", "on-demand", "running", tags={"karpenter.sh/nodeclaim": "z"})
    pairs = pair_instances(["c", "b", "a"], [*instances[:2], tagged, foreign])
    assert {name: i.id for name, i in pairs.items()} == {"a": "i-1", "b": "i-2", "c": "i-3"}
    assert {name: i.id for name, i in pair_instances(["b", "a"], instances[:1]).items()} == {"a": "i-2"}
