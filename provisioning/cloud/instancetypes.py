"""EC2 instance types as Karpenter sees them: ``DescribeInstanceTypes`` → ``InstanceType``.

Pure functions over the ``InstanceTypeInfo`` dicts boto3 returns (Karpenter reference
Part II §3): labels (§3.2), capacity (§3.3) and, through ``overhead``, what allocatable
leaves out (§3.4). The EC2NodeClass spec, when given, picks the AMI family and supplies
the kubelet block, block devices, instance-store policy and network interfaces.
Offerings (zones, capacity types, prices) are added by the catalog.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provisioning.cloud.overhead import compute_overhead
from provisioning.crd import labels as L
from provisioning.crd.ec2nodeclass import effective_ami_family
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.quantity import to_int

MiB = 2**20
GiB = 2**30

Info = Mapping[str, Any]
Spec = Mapping[str, Any]

# ------------------------------------------------------------------ AMI families


@dataclass(frozen=True)
class AMIFamily:
    """What an AMI family changes about an instance type (``resolver.go`` FeatureFlags and
    each family's default block devices, reference Part II §1.3)."""

    name: str
    eni_limited_memory_overhead: bool  # kube-reserved memory sized for the ENI pod limit, not pods()
    pods_per_core: bool  # kubelet.podsPerCore is honoured
    eni_limited_pod_density: bool  # pods default to the ENI limit; otherwise 110
    ephemeral_device: str | None  # the block device holding the kubelet root dir
    ephemeral_default: int  # that device's default size, bytes
    windows_build: str | None = None
    runs_a1: bool = True


AMI_FAMILIES = {
    family.name: family
    for family in (
        AMIFamily("AL2", True, True, True, "/dev/xvda", 20 * GiB),
        AMIFamily("AL2023", True, True, True, "/dev/xvda", 20 * GiB, runs_a1=False),
        AMIFamily("Custom", True, True, True, None, 20 * GiB),
        AMIFamily("Bottlerocket", False, False, True, "/dev/xvdb", 20 * GiB, runs_a1=False),
        AMIFamily("Windows2019", False, True, False, "/dev/sda1", 50 * GiB, windows_build="10.0.17763"),
        AMIFamily("Windows2022", False, True, False, "/dev/sda1", 50 * GiB, windows_build="10.0.20348"),
        AMIFamily("Windows2025", False, True, False, "/dev/sda1", 50 * GiB, windows_build="10.0.26100"),
    )
}
DEFAULT_AMI_FAMILY = "AL2023"
DEFAULT_VOLUME_SIZE = 20 * GiB  # amifamily.DefaultEBS, also what Custom falls back to
WINDOWS_MAX_PODS = 110


def ami_family(nodeclass_spec: Spec | None) -> AMIFamily:
    """The EC2NodeClass's family; AL2023 without a spec. A name outside the table gets
    AL2's behaviour, as upstream ``GetAMIFamily`` does for unknown names."""
    name = effective_ami_family(dict(nodeclass_spec)) if nodeclass_spec else None
    return AMI_FAMILIES.get(name or DEFAULT_AMI_FAMILY) or AMI_FAMILIES["AL2"]


# ------------------------------------------------------------------ labels

AWS = "karpenter.k8s.aws/"
INSTANCE_CATEGORY = AWS + "instance-category"
INSTANCE_FAMILY = AWS + "instance-family"
INSTANCE_GENERATION = AWS + "instance-generation"
INSTANCE_SIZE = AWS + "instance-size"
INSTANCE_CPU = AWS + "instance-cpu"
INSTANCE_CPU_MANUFACTURER = AWS + "instance-cpu-manufacturer"
INSTANCE_CPU_CLOCK_SPEED = AWS + "instance-cpu-sustained-clock-speed-mhz"
INSTANCE_MEMORY = AWS + "instance-memory"
INSTANCE_EBS_BANDWIDTH = AWS + "instance-ebs-bandwidth"
INSTANCE_NETWORK_BANDWIDTH = AWS + "instance-network-bandwidth"
INSTANCE_GPU_NAME = AWS + "instance-gpu-name"
INSTANCE_GPU_MANUFACTURER = AWS + "instance-gpu-manufacturer"
INSTANCE_GPU_COUNT = AWS + "instance-gpu-count"
INSTANCE_GPU_MEMORY = AWS + "instance-gpu-memory"
INSTANCE_ACCELERATOR_NAME = AWS + "instance-accelerator-name"
INSTANCE_ACCELERATOR_MANUFACTURER = AWS + "instance-accelerator-manufacturer"
INSTANCE_ACCELERATOR_COUNT = AWS + "instance-accelerator-count"
INSTANCE_HYPERVISOR = AWS + "instance-hypervisor"
INSTANCE_ENCRYPTION_IN_TRANSIT = AWS + "instance-encryption-in-transit-supported"
INSTANCE_LOCAL_NVME = AWS + "instance-local-nvme"
INSTANCE_CAPABILITY_FLEX = AWS + "instance-capability-flex"

KUBE_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
# Category and generation: m5.large → m, 5; u-6tb1.112xlarge → u, 1 (types.go instanceTypeScheme).
_INSTANCE_TYPE_SCHEME = re.compile(r"(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.")
# A fixed network performance: "25 Gigabit", "4x 100 Gigabit", "3200 Gigabit".
_FIXED_BANDWIDTH = re.compile(r"(?:([0-9]+)x )?([0-9.]+) Gigabit")


def kebab(value: str) -> str:
    """Upstream's lowerKabobCase: "RTX PRO 4500" → "rtx-pro-4500"."""
    return value.lower().replace(" ", "-")


def architecture(info: Info) -> str:
    """The Kubernetes arch of the first supported architecture Karpenter knows; EC2's own
    name otherwise (mac types), which ``incompatibility`` then refuses."""
    supported = info["ProcessorInfo"].get("SupportedArchitectures") or []
    for arch in supported:
        if arch in KUBE_ARCH:
            return KUBE_ARCH[arch]
    return supported[0] if supported else ""


def network_bandwidth_mbps(info: Info) -> int | None:
    """Baseline network bandwidth in Mbps, or None.

    Upstream reads a map scraped from the EC2 documentation (``zz_generated.bandwidth.go``),
    which we do not carry. The API has the same facts: a fixed ``NetworkPerformance``
    ("100 Gigabit", "4x 100 Gigabit") is the documented figure for the whole instance,
    which matters for multi-card types (p5.48xlarge: 3200 Gbps over 32 cards); for burstable
    "Up to N Gigabit" types the documented baseline is the default card's
    ``BaselineBandwidthInGbps``. Types documented only as "Moderate"/"High" get no label,
    as upstream.
    """
    network = info.get("NetworkInfo") or {}
    performance = network.get("NetworkPerformance", "")
    fixed = _FIXED_BANDWIDTH.fullmatch(performance)
    if fixed:
        return round(int(fixed.group(1) or 1) * float(fixed.group(2)) * 1000)
    baseline = _default_card(network).get("BaselineBandwidthInGbps")
    if baseline is None or (performance and "Gigabit" not in performance):
        return None
    return round(baseline * 1000)


def _accelerator_labels(info: Info) -> dict[str, str]:
    """GPU and accelerator labels, set only when the type has exactly one kind of device."""
    out: dict[str, str] = {}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if len(gpus) == 1:
        gpu = gpus[0]
        out[INSTANCE_GPU_NAME] = kebab(gpu.get("Name", ""))
        out[INSTANCE_GPU_MANUFACTURER] = kebab(gpu.get("Manufacturer", ""))
        out[INSTANCE_GPU_COUNT] = str(gpu.get("Count", 0))
        out[INSTANCE_GPU_MEMORY] = str((gpu.get("MemoryInfo") or {}).get("SizeInMiB", 0))
    neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    inference = (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    if len(neuron) == 1:
        device = neuron[0]
        out[INSTANCE_ACCELERATOR_NAME] = kebab(device.get("Name", ""))
        out[INSTANCE_ACCELERATOR_MANUFACTURER] = "aws"
        out[INSTANCE_ACCELERATOR_COUNT] = str(device.get("Count", 0))
    elif len(inference) == 1 and not info.get("NeuronInfo"):
        accelerator = inference[0]
        out[INSTANCE_ACCELERATOR_NAME] = kebab(accelerator.get("Name", ""))
        out[INSTANCE_ACCELERATOR_MANUFACTURER] = kebab(accelerator.get("Manufacturer", ""))
        out[INSTANCE_ACCELERATOR_COUNT] = str(accelerator.get("Count", 0))
    return out


def instance_labels(info: Info, *, region: str, family: AMIFamily) -> dict[str, str]:
    """The single-valued labels of §3.2 that follow from the type alone.

    Zone, zone-id, capacity type and capacity reservations belong to offerings; tenancy is
    two-valued ({default, dedicated}) so it is a requirement, not a label.
    """
    name = info["InstanceType"]
    arch = architecture(info)
    processor = info["ProcessorInfo"]
    labels = {L.INSTANCE_TYPE: name, L.ARCH: arch, L.REGION: region}
    if family.windows_build:
        labels[L.WINDOWS_BUILD] = family.windows_build
        if arch == "amd64":  # Windows AMIs are amd64 only; arm64 gets no OS at all
            labels[L.OS] = "windows"
    else:
        labels[L.OS] = "linux"

    scheme = _INSTANCE_TYPE_SCHEME.search(name)
    if scheme:
        labels[INSTANCE_CATEGORY] = scheme.group(1)
        labels[INSTANCE_GENERATION] = scheme.group(3)
    parts = name.split(".")
    if len(parts) == 2:
        labels[INSTANCE_FAMILY], labels[INSTANCE_SIZE] = parts
    labels[INSTANCE_CAPABILITY_FLEX] = str("-flex" in parts[0]).lower()

    labels[INSTANCE_CPU] = str(info["VCpuInfo"]["DefaultVCpus"])
    if processor.get("Manufacturer"):
        labels[INSTANCE_CPU_MANUFACTURER] = kebab(processor["Manufacturer"])
    # A missing clock speed reads as 0, as upstream's aws.ToFloat64(nil) does (m1, c1, t1).
    labels[INSTANCE_CPU_CLOCK_SPEED] = str(round(processor.get("SustainedClockSpeedInGhz", 0) * 1000))
    labels[INSTANCE_MEMORY] = str(info["MemoryInfo"]["SizeInMiB"])

    ebs = info.get("EbsInfo") or {}
    if ebs.get("EbsOptimizedSupport") == "default" and ebs.get("EbsOptimizedInfo"):
        labels[INSTANCE_EBS_BANDWIDTH] = str(ebs["EbsOptimizedInfo"]["MaximumBandwidthInMbps"])
    bandwidth = network_bandwidth_mbps(info)
    if bandwidth is not None:
        labels[INSTANCE_NETWORK_BANDWIDTH] = str(bandwidth)
    storage = info.get("InstanceStorageInfo") or {}
    if storage.get("NvmeSupport") != "unsupported" and storage.get("TotalSizeInGB") is not None:
        labels[INSTANCE_LOCAL_NVME] = str(storage["TotalSizeInGB"])

    labels.update(_accelerator_labels(info))
    labels[INSTANCE_HYPERVISOR] = info.get("Hypervisor", "")  # empty for bare metal
    encryption = (info.get("NetworkInfo") or {}).get("EncryptionInTransitSupported", False)
    labels[INSTANCE_ENCRYPTION_IN_TRANSIT] = str(bool(encryption)).lower()
    return labels


# ------------------------------------------------------------------ capacity


def _default_card(network: Mapping[str, Any]) -> Mapping[str, Any]:
    """The network card the VPC CNI uses (by position, as upstream indexes it)."""
    cards = network.get("NetworkCards") or []
    index = network.get("DefaultNetworkCardIndex", 0)
    return cards[index] if 0 <= index < len(cards) else {}


def eni_limited_pods(info: Info, reserved_enis: int = 0, efa_only_on_card0: int = 0) -> int:
    """``ENIs × (IPv4 per ENI − 1) + 2`` (amazon-eks-ami eni-max-pods.txt), counting only the
    default card's ENIs less those reserved (``--reserved-enis``) or taken by EFA-only
    interfaces on card 0, which carry no IPs."""
    network = info["NetworkInfo"]
    enis = _default_card(network).get("MaximumNetworkInterfaces", network.get("MaximumNetworkInterfaces", 0))
    usable = max(enis - reserved_enis - efa_only_on_card0, 0)
    if usable == 0:
        return 0
    return usable * (network["Ipv4AddressesPerInterface"] - 1) + 2


def memory_capacity(info: Info, vm_memory_overhead_percent: float) -> int:
    """Memory in bytes: Graviton keeps 64 MiB of CMA, and the hypervisor takes a share we
    can only estimate (``--vm-memory-overhead-percent``) until a node reports its own."""
    mib = info["MemoryInfo"]["SizeInMiB"]
    archs = info["ProcessorInfo"].get("SupportedArchitectures") or []
    if archs and archs[0] == "arm64":
        mib -= 64
    mib -= math.ceil(float(mib * MiB) * vm_memory_overhead_percent / 1024 / 1024)
    return mib * MiB


def pod_capacity(info: Info, family: AMIFamily, kubelet: Spec, *, reserved_enis: int, efa_only_on_card0: int) -> int:
    """kubelet.maxPods, else the ENI limit (or 110 on Windows), capped by podsPerCore where
    the family's bootstrap honours it (Bottlerocket does not)."""
    if kubelet.get("maxPods") is not None:
        count = int(kubelet["maxPods"])
    elif family.eni_limited_pod_density:
        count = eni_limited_pods(info, reserved_enis, efa_only_on_card0)
    else:
        count = WINDOWS_MAX_PODS
    per_core = int(kubelet.get("podsPerCore") or 0)
    if per_core > 0 and family.pods_per_core:
        count = min(per_core * info["VCpuInfo"]["DefaultVCpus"], count)
    return count


def _volume_size(mapping: Mapping[str, Any] | None) -> int | None:
    size = ((mapping or {}).get("ebs") or {}).get("volumeSize")
    return None if size is None else to_int("ephemeral-storage", size)


def ephemeral_storage(info: Info, family: AMIFamily, spec: Spec) -> int:
    """Bytes of the kubelet's root filesystem, first match wins:
    RAID0 of the instance store (TotalSizeInGB, decimal G); the ``rootVolume`` mapping;
    for Custom the last mapping (20Gi if unsized); the mapping on the family's ephemeral
    device; the family default (20Gi, Windows 50Gi)."""
    storage = info.get("InstanceStorageInfo") or {}
    if spec.get("instanceStorePolicy") == "RAID0" and storage.get("TotalSizeInGB") is not None:
        return storage["TotalSizeInGB"] * 10**9
    mappings = [m for m in spec.get("blockDeviceMappings") or [] if isinstance(m, Mapping)]
    if mappings:
        root = next((m for m in mappings if m.get("rootVolume")), None)
        if _volume_size(root) is not None:
            return _volume_size(root)
        if family.name == "Custom":
            size = _volume_size(mappings[-1])
            return DEFAULT_VOLUME_SIZE if size is None else size
        device = next((m for m in mappings if m.get("deviceName") == family.ephemeral_device), None)
        if _volume_size(device) is not None:
            return _volume_size(device)
    return family.ephemeral_default


def _efa_only(spec: Spec, card: int | None = None) -> int:
    return sum(
        1
        for nic in spec.get("networkInterfaces") or []
        if nic.get("interfaceType") == "efa-only" and (card is None or nic.get("networkCardIndex") == card)
    )


# GPU manufacturer → the device plugin's resource name.
GPU_RESOURCES = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu", "Habana": "habana.ai/gaudi"}


def extended_resources(info: Info, spec: Spec, *, windows: bool) -> dict[str, int]:
    """Device-plugin resources the type offers, only those above zero.

    ``vpc.amazonaws.com/pod-eni`` (security groups for pods) is left out: its branch-ENI
    count comes from a static table of the VPC resource controller that the API does not
    expose and we do not carry.
    """
    out: dict[str, int] = {}
    for gpu in (info.get("GpuInfo") or {}).get("Gpus") or []:
        resource = GPU_RESOURCES.get(gpu.get("Manufacturer", ""))
        if resource:
            out[resource] = out.get(resource, 0) + gpu.get("Count", 0)
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if devices:
        first = devices[0]  # upstream counts cores on the first device kind only
        out["aws.amazon.com/neuron"] = sum(d.get("Count", 0) for d in devices)
        out["aws.amazon.com/neuroncore"] = first.get("Count", 0) * (first.get("CoreInfo") or {}).get("Count", 0)
    network = info.get("NetworkInfo") or {}
    if isinstance(spec.get("networkInterfaces"), list):  # the NodeClass decides how many EFAs attach
        out["vpc.amazonaws.com/efa"] = _efa_only(spec)
    else:
        out["vpc.amazonaws.com/efa"] = (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0
    if windows:
        # Upstream reads IPv4PerInterface from the same static VPC table; the API field is the
        # same number for the types that table lists.
        out["vpc.amazonaws.com/PrivateIPv4Address"] = network.get("Ipv4AddressesPerInterface", 1) - 1
    return {name: amount for name, amount in out.items() if amount > 0}


# ------------------------------------------------------------------ the InstanceType


def build_instance_type(
    info: Info,
    *,
    region: str,
    nodeclass_spec: Spec | None = None,
    vm_memory_overhead_percent: float = 0.075,
    reserved_enis: int = 0,
) -> InstanceType:
    """One ``InstanceTypeInfo`` under one EC2NodeClass, without offerings."""
    spec = nodeclass_spec or {}
    family = ami_family(nodeclass_spec)
    kubelet = spec.get("kubelet") or {}
    efa_on_card0 = _efa_only(spec, card=0)
    labels = instance_labels(info, region=region, family=family)
    capacity = {
        "cpu": info["VCpuInfo"]["DefaultVCpus"] * 1000,
        "memory": memory_capacity(info, vm_memory_overhead_percent),
        "ephemeral-storage": ephemeral_storage(info, family, spec),
        "pods": pod_capacity(info, family, kubelet, reserved_enis=reserved_enis, efa_only_on_card0=efa_on_card0),
        **extended_resources(info, spec, windows=labels.get(L.OS) == "windows"),
    }
    # AL2/AL2023/Custom size kube-reserved memory for the ENI limit even when maxPods or
    # --reserved-enis say otherwise; Bottlerocket and Windows use the pod capacity.
    if family.eni_limited_memory_overhead:
        memory_pods = eni_limited_pods(info, 0, efa_on_card0)
    else:
        memory_pods = capacity["pods"]
    overhead = compute_overhead(
        cpu=capacity["cpu"],
        memory=capacity["memory"],
        ephemeral_storage=capacity["ephemeral-storage"],
        memory_pods=memory_pods,
        kubelet=kubelet,
    )
    return InstanceType(name=info["InstanceType"], labels=labels, capacity=capacity, overhead=overhead)


# ------------------------------------------------------------------ compatibility


def _discoverable(info: Info, spec: Spec, family: AMIFamily) -> str | None:
    """Discovery asks EC2 only for HVM types on x86_64 or arm64; say so if others slip in."""
    if architecture(info) not in KUBE_ARCH.values():
        return f"Karpenter runs only x86_64 and arm64 instances, not {architecture(info)}"
    if "hvm" not in (info.get("SupportedVirtualizationTypes") or ["hvm"]):
        return "Karpenter runs only HVM instances"
    return None


def _family_runs(info: Info, spec: Spec, family: AMIFamily) -> str | None:
    if not family.runs_a1 and info["InstanceType"].split(".")[0] == "a1":
        return f"{family.name} does not run a1 instances"
    if family.windows_build and architecture(info) != "amd64":
        return f"{family.name} runs only on amd64"
    return None


def _connection_tracking(info: Info, spec: Spec, family: AMIFamily) -> str | None:
    if spec.get("connectionTracking") and info.get("Hypervisor") != "nitro":
        return "connectionTracking needs a nitro instance"
    return None


def _nested_virtualization(info: Info, spec: Spec, family: AMIFamily) -> str | None:
    wanted = (spec.get("cpuOptions") or {}).get("nestedVirtualization") == "enabled"
    if wanted and "nested-virtualization" not in (info["ProcessorInfo"].get("SupportedFeatures") or []):
        return "cpuOptions.nestedVirtualization needs nested-virtualization support"
    return None


def _network_interfaces(info: Info, spec: Spec, family: AMIFamily) -> str | None:
    """The checks of upstream ``compatibility.go``: ENA, enough cards, device indices, EFAs."""
    interfaces = spec.get("networkInterfaces")
    if not isinstance(interfaces, list):
        return None
    network = info.get("NetworkInfo") or {}
    cards = network.get("NetworkCards") or []
    if not cards:
        return "networkInterfaces need network card information this type does not report"
    if network.get("EnaSupport") == "unsupported":
        return "networkInterfaces need ENA support"
    for nic in interfaces:
        card, device = nic.get("networkCardIndex", 0), nic.get("deviceIndex", 0)
        if card >= len(cards):
            return f"networkInterfaces use network card {card}; this type has {len(cards)}"
        limit = cards[card].get("MaximumNetworkInterfaces", 0)
        if device >= limit:
            return f"networkInterfaces use device index {device} on card {card}; it takes {limit} interfaces"
    wanted = _efa_only(spec)
    available = (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0
    if wanted > available:
        return f"networkInterfaces need EFA interfaces: {wanted} asked, {available} supported"
    return None


_CHECKS = (_discoverable, _family_runs, _connection_tracking, _nested_virtualization, _network_interfaces)


def incompatibility(info: Info, nodeclass_spec: Spec | None) -> str | None:
    """None when the EC2NodeClass can launch this type, else the first reason it cannot.

    Placement-group strategy is not checked here: it needs the resolved group, not the spec.
    """
    spec = nodeclass_spec or {}
    family = ami_family(nodeclass_spec)
    for check in _CHECKS:
        reason = check(info, spec, family)
        if reason:
            return reason
    return None
