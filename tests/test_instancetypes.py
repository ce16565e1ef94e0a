"""DescribeInstanceTypes → InstanceType: labels, capacity, overhead and compatibility.

Real ``InstanceTypeInfo`` data comes from moto's bundled snapshot (moto 5.2.5,
``moto/ec2/resources/instance_types.json.gz``), a dict keyed by type name whose values
have the shape boto3 returns. The golden numbers are the reference's (Part II §3.3–3.4).
"""

from __future__ import annotations

import copy
import gzip
import json
import math
from functools import cache
from pathlib import Path

import moto
import pytest

from provisioning.cloud.instancetypes import (
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_CATEGORY,
    INSTANCE_CPU,
    INSTANCE_CPU_CLOCK_SPEED,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_MEMORY,
    INSTANCE_GPU_NAME,
    INSTANCE_HYPERVISOR,
    INSTANCE_LOCAL_NVME,
    INSTANCE_MEMORY,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_SIZE,
    build_instance_type,
    eni_limited_pods,
    incompatibility,
)
from provisioning.cloud.overhead import kube_reserved_cpu
from provisioning.crd import labels as L
from provisioning.scheduling.quantity import format_quantity

REGION = "us-west-2"
MiB = 2**20
GiB = 2**30


@cache
def moto_types() -> dict[str, dict]:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path) as f:
        return json.load(f)


def info(name: str) -> dict:
    types = moto_types()
    if name not in types:
        pytest.skip(f"{name} is not in moto's instance-type data")
    return copy.deepcopy(types[name])


def build(name: str, spec: dict | None = None, **kwargs):
    return build_instance_type(info(name), region=REGION, nodeclass_spec=spec, **kwargs)


def shown(resources) -> dict[str, str]:
    return {name: format_quantity(name, amount) for name, amount in resources.items()}


def nodeclass(family: str = "AL2023", **spec) -> dict:
    return {"amiFamily": family, **spec}


# ------------------------------------------------------------------ golden allocatable


def test_m5_large_on_al2023_defaults_matches_the_published_allocatable():
    it = build("m5.large")
    assert it.name == "m5.large"
    assert it.offerings == ()
    assert shown(it.capacity) == {"cpu": "2", "memory": "7577Mi", "ephemeral-storage": "20Gi", "pods": "29"}
    assert shown(it.allocatable) == {"cpu": "1930m", "memory": "6903Mi", "ephemeral-storage": "17Gi", "pods": "29"}
    assert shown(it.overhead.kube_reserved) == {"cpu": "70m", "memory": "574Mi", "ephemeral-storage": "1Gi"}
    assert it.overhead.system_reserved == {}
    assert shown(it.overhead.eviction_threshold) == {"memory": "100Mi", "ephemeral-storage": "2Gi"}


def test_no_spec_means_al2023():
    assert build("m5.large").allocatable == build("m5.large", nodeclass("AL2023")).allocatable
    alias = {"amiSelectorTerms": [{"alias": "al2023@latest"}]}
    assert build("m5.large", alias).allocatable == build("m5.large").allocatable


def test_graviton_loses_64mib_before_the_vm_overhead():
    it = build("a1.large", nodeclass("AL2"))  # AL2023 does not run a1, the arithmetic is the same
    assert format_quantity("memory", it.capacity["memory"]) == "3729Mi"  # 4096 − 64 = 4032, − ceil(302.4)
    assert format_quantity("memory", it.allocatable["memory"]) == "3055Mi"


def test_a1_medium_has_eight_eni_limited_pods():
    assert eni_limited_pods(info("a1.medium")) == 8  # 2 ENIs × (4 − 1) + 2
    assert build("a1.medium", nodeclass("AL2")).capacity["pods"] == 8


def test_g5_12xlarge_has_737_pods():
    assert eni_limited_pods(info("g5.12xlarge")) == 737  # 15 × 49 + 2
    assert build("g5.12xlarge").capacity["pods"] == 737


def test_eni_limited_pods_takes_reserved_and_efa_only_enis_off_the_default_card():
    m5 = info("m5.large")  # 3 ENIs × 10 IPs
    assert eni_limited_pods(m5, reserved_enis=1) == 20
    assert eni_limited_pods(m5, efa_only_on_card0=1) == 20
    assert eni_limited_pods(m5, reserved_enis=3) == 0
    assert eni_limited_pods(m5, reserved_enis=5) == 0


@pytest.mark.parametrize(
    ("vcpus", "reserved"),
    [(1, "60m"), (2, "70m"), (4, "80m"), (8, "90m"), (48, "190m"), (96, "310m")],
)
def test_kube_reserved_cpu_bands(vcpus, reserved):
    assert format_quantity("cpu", kube_reserved_cpu(vcpus * 1000)) == reserved


def test_kube_reserved_cpu_on_a_built_type():
    assert format_quantity("cpu", build("m5.12xlarge").overhead.kube_reserved["cpu"]) == "190m"


def test_vm_memory_overhead_percent_is_a_parameter():
    it = build("m5.large", vm_memory_overhead_percent=0.0)
    assert it.capacity["memory"] == 8192 * MiB


# ------------------------------------------------------------------ labels


def test_m5_large_labels():
    labels = build("m5.large").labels
    assert labels[L.INSTANCE_TYPE] == "m5.large"
    assert labels[L.ARCH] == "amd64"
    assert labels[L.OS] == "linux"
    assert labels[L.REGION] == REGION
    assert L.WINDOWS_BUILD not in labels
    assert labels[INSTANCE_CATEGORY] == "m"
    assert labels[INSTANCE_FAMILY] == "m5"
    assert labels[INSTANCE_GENERATION] == "5"
    assert labels[INSTANCE_SIZE] == "large"
    assert labels[INSTANCE_CPU] == "2"
    assert labels[INSTANCE_MEMORY] == "8192"
    assert labels[INSTANCE_HYPERVISOR] == "nitro"
    assert labels[INSTANCE_CPU_MANUFACTURER] == "intel"
    assert labels[INSTANCE_CPU_CLOCK_SPEED] == "3100"
    assert labels[INSTANCE_EBS_BANDWIDTH] == "4750"
    assert labels[INSTANCE_NETWORK_BANDWIDTH] == "750"
    assert labels[INSTANCE_ENCRYPTION_IN_TRANSIT] == "false"
    assert labels[INSTANCE_CAPABILITY_FLEX] == "false"
    assert INSTANCE_LOCAL_NVME not in labels
    assert INSTANCE_GPU_NAME not in labels
    assert INSTANCE_ACCELERATOR_NAME not in labels


def test_u_6tb1_category_and_generation():
    labels = build("u-6tb1.112xlarge").labels
    assert labels[INSTANCE_CATEGORY] == "u"
    assert labels[INSTANCE_GENERATION] == "1"
    assert labels[INSTANCE_FAMILY] == "u-6tb1"
    assert labels[INSTANCE_SIZE] == "112xlarge"


def test_single_gpu_labels_and_capacity():
    it = build("g4dn.xlarge")
    assert it.labels[INSTANCE_GPU_NAME] == "t4"
    assert it.labels[INSTANCE_GPU_MANUFACTURER] == "nvidia"
    assert it.labels[INSTANCE_GPU_COUNT] == "1"
    assert it.labels[INSTANCE_GPU_MEMORY] == "16384"
    assert it.labels[INSTANCE_LOCAL_NVME] == "125"
    assert it.capacity["nvidia.com/gpu"] == 1
    assert it.allocatable["nvidia.com/gpu"] == 1


def test_gpu_labels_need_exactly_one_gpu_entry():
    g4dn = info("g4dn.xlarge")
    g4dn["GpuInfo"]["Gpus"].append(dict(g4dn["GpuInfo"]["Gpus"][0], Name="A10G", Count=2))
    it = build_instance_type(g4dn, region=REGION)
    assert INSTANCE_GPU_NAME not in it.labels
    assert it.capacity["nvidia.com/gpu"] == 3


def test_neuron_devices_give_accelerator_labels_and_neuron_resources():
    it = build("trn1.32xlarge")
    assert it.labels[INSTANCE_ACCELERATOR_NAME] == "trainium"
    assert it.labels[INSTANCE_ACCELERATOR_MANUFACTURER] == "aws"
    assert it.labels[INSTANCE_ACCELERATOR_COUNT] == "16"
    assert it.capacity["aws.amazon.com/neuron"] == 16
    assert it.capacity["aws.amazon.com/neuroncore"] == 32
    assert it.capacity["vpc.amazonaws.com/efa"] == 8


def test_inferentia_labels_come_from_neuron_info():
    it = build("inf1.xlarge")
    assert it.labels[INSTANCE_ACCELERATOR_NAME] == "inferentia"
    assert it.labels[INSTANCE_ACCELERATOR_MANUFACTURER] == "aws"
    assert it.capacity["aws.amazon.com/neuroncore"] == 4


def test_non_neuron_inference_accelerator_labels():
    labels = build("dl2q.24xlarge").labels
    assert labels[INSTANCE_ACCELERATOR_NAME] == "qualcomm-ai100"
    assert labels[INSTANCE_ACCELERATOR_MANUFACTURER] == "qualcomm"
    assert labels[INSTANCE_ACCELERATOR_COUNT] == "8"


def test_zero_extended_resources_are_left_out():
    assert set(build("m5.large").capacity) == {"cpu", "memory", "ephemeral-storage", "pods"}


@pytest.mark.parametrize(
    ("name", "mbps"),
    [("m5.large", "750"), ("t3.nano", "32"), ("p5.48xlarge", "3200000"), ("p4d.24xlarge", "400000")],
)
def test_network_bandwidth(name, mbps):
    assert build(name).labels[INSTANCE_NETWORK_BANDWIDTH] == mbps


def test_vague_network_performance_gets_no_bandwidth_label():
    assert INSTANCE_NETWORK_BANDWIDTH not in build("m4.large").labels  # "Moderate"


def test_flex_metal_and_arm_labels():
    assert build("c7i-flex.large").labels[INSTANCE_CAPABILITY_FLEX] == "true"
    assert build("m5.metal").labels[INSTANCE_HYPERVISOR] == ""
    graviton = build("m6g.large").labels
    assert graviton[L.ARCH] == "arm64"
    assert graviton[INSTANCE_CPU_MANUFACTURER] == "aws"


# ------------------------------------------------------------------ kubelet overrides


def test_max_pods_sets_pods_but_al2023_kube_reserved_memory_stays_eni_limited():
    it = build("m5.large", nodeclass(kubelet={"maxPods": 110}))
    assert it.capacity["pods"] == 110
    assert format_quantity("memory", it.overhead.kube_reserved["memory"]) == "574Mi"  # 11 × 29 + 255


def test_bottlerocket_sizes_kube_reserved_memory_for_its_pods():
    it = build("m5.large", nodeclass("Bottlerocket", kubelet={"maxPods": 110}))
    assert format_quantity("memory", it.overhead.kube_reserved["memory"]) == "1465Mi"  # 11 × 110 + 255


def test_reserved_enis_lower_pods_but_not_kube_reserved_memory():
    it = build("m5.large", reserved_enis=1)
    assert it.capacity["pods"] == 20
    assert format_quantity("memory", it.overhead.kube_reserved["memory"]) == "574Mi"


def test_kube_reserved_replaces_per_key():
    it = build("m5.large", nodeclass(kubelet={"kubeReserved": {"memory": "1Gi"}}))
    assert it.overhead.kube_reserved["memory"] == GiB
    assert format_quantity("cpu", it.overhead.kube_reserved["cpu"]) == "70m"
    assert format_quantity("memory", it.allocatable["memory"]) == "6453Mi"  # 7577 − 1024 − 100


def test_system_reserved_is_subtracted_as_written():
    it = build("m5.large", nodeclass(kubelet={"systemReserved": {"cpu": "100m", "memory": "200Mi"}}))
    assert format_quantity("cpu", it.allocatable["cpu"]) == "1830m"
    assert format_quantity("memory", it.allocatable["memory"]) == "6703Mi"


def test_eviction_hard_percentages_use_the_computed_capacity():
    it = build("m5.large", nodeclass(kubelet={"evictionHard": {"memory.available": "5%", "nodefs.available": "15%"}}))
    memory, storage = it.capacity["memory"], it.capacity["ephemeral-storage"]
    assert it.overhead.eviction_threshold["memory"] == math.ceil(memory * 5 / 100)
    assert it.overhead.eviction_threshold["ephemeral-storage"] == math.ceil(storage * 15 / 100)
    assert it.allocatable["memory"] == memory - 574 * MiB - math.ceil(memory * 5 / 100)


def test_eviction_hard_quantities_and_100_percent():
    it = build(
        "m5.large", nodeclass(kubelet={"evictionHard": {"memory.available": "500Mi", "nodefs.available": "100%"}})
    )
    assert it.overhead.eviction_threshold == {"memory": 500 * MiB, "ephemeral-storage": 0}


def test_eviction_soft_does_not_touch_allocatable():
    soft = {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}
    assert build("m5.large", nodeclass(kubelet=soft)).allocatable == build("m5.large").allocatable


def test_pods_per_core_caps_pods_except_on_bottlerocket():
    assert build("m5.large", nodeclass(kubelet={"podsPerCore": 4})).capacity["pods"] == 8
    assert build("m5.large", nodeclass(kubelet={"podsPerCore": 40})).capacity["pods"] == 29
    assert build("m5.large", nodeclass("Bottlerocket", kubelet={"podsPerCore": 4})).capacity["pods"] == 29


# ------------------------------------------------------------------ Windows


def test_windows_has_110_pods_and_windows_labels():
    it = build("m5.large", nodeclass("Windows2022"))
    assert it.capacity["pods"] == 110
    assert it.labels[L.OS] == "windows"
    assert it.labels[L.WINDOWS_BUILD] == "10.0.20348"
    assert format_quantity("memory", it.overhead.kube_reserved["memory"]) == "1465Mi"
    assert format_quantity("ephemeral-storage", it.capacity["ephemeral-storage"]) == "50Gi"
    assert it.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == 9


def test_windows_pods_per_core_applies():
    assert build("m5.large", nodeclass("Windows2019", kubelet={"podsPerCore": 10})).capacity["pods"] == 20


def test_windows_on_arm64_has_no_os_and_is_incompatible():
    it = build("m6g.large", nodeclass("Windows2022"))
    assert L.OS not in it.labels
    assert incompatibility(info("m6g.large"), nodeclass("Windows2022")) == "Windows2022 runs only on amd64"


# ------------------------------------------------------------------ ephemeral storage


def test_raid0_uses_the_instance_store_in_decimal_gigabytes():
    it = build("m5d.large", nodeclass(instanceStorePolicy="RAID0"))
    assert it.capacity["ephemeral-storage"] == 75 * 10**9
    assert it.overhead.eviction_threshold["ephemeral-storage"] == math.ceil(75 * 10**9 / 10)


def test_raid0_without_instance_store_keeps_the_root_volume():
    assert build("m5.large", nodeclass(instanceStorePolicy="RAID0")).capacity["ephemeral-storage"] == 20 * GiB


def test_root_volume_mapping_size_is_respected():
    mappings = [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}},
        {"deviceName": "/dev/xvdc", "rootVolume": True, "ebs": {"volumeSize": "100Gi"}},
    ]
    it = build("m5.large", nodeclass(blockDeviceMappings=mappings))
    assert format_quantity("ephemeral-storage", it.capacity["ephemeral-storage"]) == "100Gi"
    assert format_quantity("ephemeral-storage", it.allocatable["ephemeral-storage"]) == "89Gi"  # − 1Gi − 10Gi


def test_the_family_ephemeral_device_mapping_is_used_without_a_root_volume():
    al2023 = nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64G"}}])
    assert build("m5.large", al2023).capacity["ephemeral-storage"] == 64 * 10**9
    bottlerocket = nodeclass(
        "Bottlerocket",
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "80Gi"}},
        ],
    )
    assert build("m5.large", bottlerocket).capacity["ephemeral-storage"] == 80 * GiB
    other_device = nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvdz", "ebs": {"volumeSize": "80Gi"}}])
    assert build("m5.large", other_device).capacity["ephemeral-storage"] == 20 * GiB


def test_custom_uses_the_last_mapping_or_20gi():
    sized = nodeclass(
        "Custom",
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Gi"}},
            {"deviceName": "/dev/xvdq", "ebs": {"volumeSize": "200Gi"}},
        ],
    )
    assert build("m5.large", sized).capacity["ephemeral-storage"] == 200 * GiB
    unsized = nodeclass("Custom", blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-1"}}])
    assert build("m5.large", unsized).capacity["ephemeral-storage"] == 20 * GiB
    assert build("m5.large", nodeclass("Custom")).capacity["ephemeral-storage"] == 20 * GiB


# ------------------------------------------------------------------ network interfaces


EFA_INTERFACES = [
    {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
    {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
]


def test_efa_only_interfaces_set_the_efa_count_and_cost_pods():
    it = build("g5.12xlarge", nodeclass(networkInterfaces=EFA_INTERFACES))
    assert it.capacity["vpc.amazonaws.com/efa"] == 1
    assert it.capacity["pods"] == 14 * 49 + 2
    assert format_quantity("memory", it.overhead.kube_reserved["memory"]) == f"{11 * (14 * 49 + 2) + 255}Mi"


def test_interfaces_without_efa_remove_the_efa_resource():
    plain = nodeclass(networkInterfaces=EFA_INTERFACES[:1])
    assert "vpc.amazonaws.com/efa" not in build("g5.12xlarge", plain).capacity


# ------------------------------------------------------------------ compatibility


def test_compatible_types_have_no_reason():
    assert incompatibility(info("m5.large"), None) is None
    assert incompatibility(info("m5.large"), nodeclass("Bottlerocket")) is None
    assert incompatibility(info("a1.large"), nodeclass("AL2")) is None


@pytest.mark.parametrize(
    ("name", "spec", "reason"),
    [
        ("a1.large", None, "AL2023 does not run a1 instances"),
        ("a1.medium", nodeclass(), "AL2023 does not run a1 instances"),
        ("a1.large", nodeclass("Bottlerocket"), "Bottlerocket does not run a1 instances"),
        ("a1.large", nodeclass("Windows2022"), "Windows2022 runs only on amd64"),
        ("m4.large", nodeclass(connectionTracking={"udpTimeout": 30}), "connectionTracking needs a nitro instance"),
        (
            "m5.large",
            nodeclass(cpuOptions={"nestedVirtualization": "enabled"}),
            "cpuOptions.nestedVirtualization needs nested-virtualization support",
        ),
        ("m4.large", nodeclass(networkInterfaces=EFA_INTERFACES[:1]), "networkInterfaces need ENA support"),
        (
            "m5.large",
            nodeclass(networkInterfaces=EFA_INTERFACES[:1] + [{**EFA_INTERFACES[0], "networkCardIndex": 1}]),
            "networkInterfaces use network card 1; this type has 1",
        ),
        (
            "m5.large",
            nodeclass(networkInterfaces=EFA_INTERFACES[:1] + [{**EFA_INTERFACES[0], "deviceIndex": 3}]),
            "networkInterfaces use device index 3 on card 0; it takes 3 interfaces",
        ),
        (
            "m5.large",
            nodeclass(networkInterfaces=EFA_INTERFACES),
            "networkInterfaces need EFA interfaces: 1 asked, 0 supported",
        ),
    ],
)
def test_incompatibility_reasons(name, spec, reason):
    assert incompatibility(info(name), spec) == reason


def test_features_that_match_are_compatible():
    assert incompatibility(info("m5.large"), nodeclass(connectionTracking={"udpTimeout": 30})) is None
    nested = nodeclass(cpuOptions={"nestedVirtualization": "enabled"})
    assert incompatibility(info("c7i-flex.large"), nested) is None
    assert incompatibility(info("m5.large"), nodeclass(cpuOptions={"nestedVirtualization": "disabled"})) is None
    assert incompatibility(info("g5.12xlarge"), nodeclass(networkInterfaces=EFA_INTERFACES)) is None


def test_mac_types_are_refused_but_still_build():
    mac = next(
        name for name, i in moto_types().items() if i["ProcessorInfo"]["SupportedArchitectures"] == ["arm64_mac"]
    )
    assert incompatibility(info(mac), None) == "Karpenter runs only x86_64 and arm64 instances, not arm64_mac"
    assert build(mac).labels[L.ARCH] == "arm64_mac"


# ------------------------------------------------------------------ the whole catalog


@pytest.mark.parametrize(
    "spec",
    [
        None,
        nodeclass("AL2", kubelet={"podsPerCore": 10}),
        nodeclass("Bottlerocket", instanceStorePolicy="RAID0"),
        nodeclass("Windows2025"),
        nodeclass("Custom", networkInterfaces=EFA_INTERFACES),
    ],
    ids=["default", "al2", "bottlerocket", "windows", "custom"],
)
def test_every_moto_type_builds_quietly(spec, capsys):
    for name, raw in moto_types().items():
        it = build_instance_type(raw, region=REGION, nodeclass_spec=spec)
        assert it.name == name
        assert all(isinstance(v, str) for v in it.labels.values()), name
        assert all(isinstance(v, int) for v in it.capacity.values()), name
        assert all(isinstance(v, int) for v in it.overhead.total().values()), name
        assert it.capacity["cpu"] > 0 and it.capacity["memory"] > 0, name
        assert it.allocatable["pods"] == it.capacity["pods"], name
        incompatibility(raw, spec)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
