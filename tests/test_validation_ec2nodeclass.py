"""EC2NodeClass validation: every rule of the main 1d927085 table and of the v1.14.1
``spec.kubelet`` table, the runtime rules, the defaults, and the quirks upstream has.

Each rule has an accepted and a rejected example, built from the seed EC2NodeClass.
Pure: no database, no Django settings.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioning.crd import default, validate
from provisioning.crd import ec2nodeclass as E
from provisioning.crd.schema import MISSING, Array, Integer, Map, Object, String

SEED = yaml.safe_load((Path(__file__).resolve().parent / "fixtures" / "seed" / "ec2nodeclass.yaml").read_text())
DROP = object()

TAGS = {"karpenter.sh/discovery": "my-cluster"}
ALIAS = [{"alias": "al2023@latest"}]
AMI_ID = [{"id": "ami-0123456789abcdef0"}]
SUBNET_ID = "subnet-0123456789abcdef0"
SG_ID = "sg-0123456789abcdef0"


def make(**spec: Any) -> dict[str, Any]:
    """The seed with top-level spec fields replaced (``DROP`` removes one)."""
    doc = copy.deepcopy(SEED)
    for name, value in spec.items():
        if value is DROP:
            doc["spec"].pop(name, None)
        else:
            doc["spec"][name] = copy.deepcopy(value)
    return doc


def errors(doc: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    return [(e.path, e.message) for e in validate(doc, old).errors]


def kubelet(**fields: Any) -> dict[str, Any]:
    return make(kubelet=fields)


def ami(terms: list[dict[str, Any]], family: str | None = None) -> dict[str, Any]:
    return make(amiSelectorTerms=terms, amiFamily=family if family is not None else DROP)


def ebs(**fields: Any) -> dict[str, Any]:
    return make(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": fields}])


def nic(card: int, device: int, kind: str = "interface") -> dict[str, Any]:
    return {"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind}


def many_tags(n: int) -> dict[str, str]:
    return {f"key{i}": "v" for i in range(n)}


# ---------------------------------------------------------------- messages (verbatim upstream)

M_ROLE_XOR = "must specify exactly one of ['role', 'instanceProfile']"
M_FAMILY = "if set, amiFamily must be '{0}' or 'Custom' when using {1} {0} alias"
M_NEED_FAMILY = "must specify amiFamily if amiSelectorTerms does not contain an alias"
M_AMI_ONE = "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"
M_AMI_ID = "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
M_AMI_ALIAS_FIELDS = (
    "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
)
M_AMI_ALIAS_TERMS = "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
M_ALIAS_FORMAT = "'alias' is improperly formatted, must match the format 'family@version'"
M_ALIAS_FAMILY = (
    "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', "
    "'windows2019', 'windows2022', 'windows2025'"
)
M_ALIAS_WINDOWS = "windows families may only specify version 'latest'"
M_TAG_EMPTY = "empty tag keys or values aren't supported"
M_ROOT = "must have only one blockDeviceMappings with rootVolume"
M_EBS_SOURCE = "snapshotID or volumeSize must be defined"
M_EBS_INIT = "snapshotID must be set when volumeInitializationRate is set"
M_CR_ONE = "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"
M_CR_ID = "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"
M_CT = "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"
M_PROFILE_EMPTY = "instanceProfile cannot be empty"
M_NIC_PRIMARY = "networkInterfaces must include a primary interface with interfaceType='interface'"
M_NIC_UNIQUE = (
    "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at "
    "most one efa device per network card"
)
M_PG_ONE = "expected at least one, got none, ['name', 'id']"
M_PG_XOR = "'name' and 'id' are mutually exclusive"
M_ROLE_EMPTY = "role cannot be empty"
M_SG_EMPTY = "securityGroupSelectorTerms cannot be empty"
M_SG_ONE = "expected at least one, got none, ['tags', 'id', 'name']"
M_SG_ID = (
    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"
)
M_SG_NAME = (
    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"
)
M_SUBNET_EMPTY = "subnetSelectorTerms cannot be empty"
M_SUBNET_ONE = "expected at least one, got none, ['tags', 'id']"
M_SUBNET_ID = "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"
M_TAGS_EMPTY_KEY = "empty tag keys aren't supported"
M_TAGS_RESTRICTED = "tag contains a restricted tag matching {}"
SIGNALS = (
    "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree',"
    "'pid.available']"
)
M_KEYS_SIGNAL = "valid keys for {} are " + SIGNALS
M_KEYS_RESERVED = "valid keys for {} are ['cpu','memory','ephemeral-storage','pid']"
M_NEGATIVE = "{} value cannot be a negative resource quantity"
M_GC = "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
M_SOFT_NO_GRACE = "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"
M_GRACE_NO_SOFT = "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"


# ---------------------------------------------------------------- accepted examples

ACCEPTED = [
    # spec-level CEL
    pytest.param(make(), id="role-xor-profile:role-only"),
    pytest.param(make(role=DROP, instanceProfile="KarpenterNodeInstanceProfile"), id="role-xor-profile:profile-only"),
    pytest.param(ami([{"alias": "al2@v20240625"}], "AL2"), id="family-al2:AL2"),
    pytest.param(ami([{"alias": "al2@latest"}], "Custom"), id="family-al2:Custom"),
    pytest.param(ami(ALIAS, "AL2023"), id="family-al2023:AL2023"),
    pytest.param(ami([{"alias": "bottlerocket@v1.20.0"}], "Bottlerocket"), id="family-bottlerocket:Bottlerocket"),
    pytest.param(ami([{"alias": "windows2019@latest"}], "Windows2019"), id="family-windows2019:Windows2019"),
    pytest.param(ami([{"alias": "windows2022@latest"}], "Custom"), id="family-windows2022:Custom"),
    pytest.param(ami([{"alias": "windows2025@latest"}], "Windows2025"), id="family-windows2025:Windows2025"),
    pytest.param(ami(AMI_ID, "AL2023"), id="need-family:id-with-family"),
    pytest.param(ami(ALIAS), id="need-family:alias-without-family"),
    # amiFamily / amiSelectorTerms
    pytest.param(ami(AMI_ID, "Bottlerocket"), id="amiFamily-enum"),
    pytest.param(ami([{"id": f"ami-{i:04d}"} for i in range(30)], "AL2023"), id="ami-terms-maxItems:30"),
    pytest.param(ami([{"ssmParameter": "/my/ami"}], "AL2023"), id="ami-at-least-one:ssmParameter"),
    pytest.param(ami([{"name": "my-ami-*", "owner": "self"}], "AL2023"), id="ami-at-least-one:name+owner"),
    pytest.param(ami([{"id": "ami-1"}, {"tags": TAGS}], "AL2023"), id="ami-id-exclusive:separate-terms"),
    pytest.param(ami([{"id": "ami-1", "tags": {}}], "AL2023"), id="ami-id-exclusive:empty-tags-not-set"),
    pytest.param(ami([{"alias": "bottlerocket@1.10.0"}]), id="ami-alias-fields:alias-alone"),
    pytest.param(ami([{"alias": "al2023@v20240625"}]), id="ami-alias-terms:single-term"),
    pytest.param(ami([{"alias": "bottlerocket@v1.100.100"}]), id="alias-maxLength:30"),
    pytest.param(ami([{"alias": "al2023@v20240625"}]), id="alias-format:pinned"),
    pytest.param(ami([{"alias": "windows2025@latest"}]), id="alias-family:windows2025"),
    pytest.param(ami([{"alias": "windows2019@latest"}]), id="alias-windows-latest"),
    pytest.param(ami([{"id": "ami-0abc"}], "Custom"), id="ami-id-pattern"),
    pytest.param(ami([{"id": "xami-123"}], "Custom"), id="ami-id-pattern:unanchored"),
    pytest.param(ami([{"tags": many_tags(20)}], "Custom"), id="ami-tags-maxProperties:20"),
    pytest.param(ami([{"tags": {"Name": "*"}}], "Custom"), id="ami-tags-empty:wildcard"),
    # blockDeviceMappings
    pytest.param(make(blockDeviceMappings=[{"deviceName": f"/dev/xvd{i}"} for i in range(50)]), id="bdm-maxItems:50"),
    pytest.param(
        make(
            blockDeviceMappings=[
                {"deviceName": "/dev/xvda", "rootVolume": True},
                {"deviceName": "/dev/xvdb", "rootVolume": False},
            ]
        ),
        id="bdm-one-root",
    ),
    pytest.param(ebs(volumeSize="20Gi"), id="ebs-source:volumeSize"),
    pytest.param(ebs(snapshotID="snap-0123"), id="ebs-source:snapshotID"),
    pytest.param(ebs(snapshotID="snap-0123", volumeInitializationRate=100), id="ebs-init-rate:min-with-snapshot"),
    pytest.param(ebs(snapshotID="snap-0123", volumeInitializationRate=300), id="ebs-init-rate:max"),
    pytest.param(ebs(volumeSize="20Gi", iops=16000, throughput=1000), id="ebs-iops-throughput:int64"),
    pytest.param(
        ebs(
            volumeSize="100Gi",
            volumeType="io2",
            encrypted=True,
            deleteOnTermination=False,
            kmsKeyID="arn:aws:kms:us-east-1:111122223333:key/abc",
        ),
        id="ebs-volumeType-enum",
    ),
    *(
        pytest.param(ebs(volumeSize=size), id=f"volumeSize:{size}")
        for size in ("1Gi", "59000Gi", "58999Gi", "64000G", "1T", "64T", "17Ti", "58Ti", "Ti", "T")
    ),
    # capacityReservationSelectorTerms
    pytest.param(make(capacityReservationSelectorTerms=[{"id": f"cr-{i}"} for i in range(30)]), id="cr-maxItems:30"),
    pytest.param(make(capacityReservationSelectorTerms=[{"instanceMatchCriteria": "open"}]), id="cr-at-least-one"),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": "cr-1", "ownerID": "123456789012"}, {"tags": TAGS}]),
        id="cr-id-exclusive:quirk-not-all-bad",
    ),
    pytest.param(make(capacityReservationSelectorTerms=[{"id": "cr-0123abc"}]), id="cr-id-pattern"),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"instanceMatchCriteria": "targeted", "ownerID": "123456789012"}]),
        id="cr-enum-and-ownerID",
    ),
    pytest.param(make(capacityReservationSelectorTerms=[{"tags": many_tags(20)}]), id="cr-tags-maxProperties:20"),
    # connectionTracking
    pytest.param(make(connectionTracking={"udpTimeout": 30}), id="ct-at-least-one"),
    pytest.param(
        make(connectionTracking={"tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 60}),
        id="ct-maximums",
    ),
    pytest.param(make(connectionTracking={"tcpEstablishedTimeout": 60, "udpStreamTimeout": 60}), id="ct-minimums"),
    pytest.param(make(cpuOptions={"nestedVirtualization": "enabled"}), id="cpuOptions-enum"),
    pytest.param(make(instanceStorePolicy="RAID0"), id="instanceStorePolicy-enum"),
    pytest.param(make(ipPrefixCount=0), id="ipPrefixCount-minimum"),
    # metadataOptions
    pytest.param(
        make(
            metadataOptions={
                "httpEndpoint": "disabled",
                "httpProtocolIPv6": "enabled",
                "httpPutResponseHopLimit": 64,
                "httpTokens": "required",
            }
        ),
        id="metadataOptions-enums-and-max",
    ),
    pytest.param(make(metadataOptions={"httpPutResponseHopLimit": 1}), id="metadataOptions-hop-minimum"),
    # networkInterfaces
    pytest.param(make(networkInterfaces=[]), id="nic-primary:empty-list"),
    pytest.param(make(networkInterfaces=[nic(0, 0)]), id="nic-primary"),
    pytest.param(make(networkInterfaces=[nic(0, 0), nic(1, 0, "efa-only"), nic(2, 0, "efa-only")]), id="nic-unique"),
    pytest.param(make(networkInterfaces=[nic(0, i) for i in range(150)]), id="nic-maxItems:150"),
    # placementGroupSelector
    pytest.param(make(placementGroupSelector={"name": "my-pg"}), id="pg-at-least-one:name"),
    pytest.param(make(placementGroupSelector={"id": "pg-0123abc"}), id="pg-id-pattern"),
    pytest.param(make(role="r"), id="role-not-empty"),
    # securityGroupSelectorTerms
    pytest.param(make(securityGroupSelectorTerms=[{"id": f"sg-{i}"} for i in range(30)]), id="sg-maxItems:30"),
    pytest.param(make(securityGroupSelectorTerms=[{"name": "my-sg"}]), id="sg-at-least-one:name"),
    pytest.param(
        make(securityGroupSelectorTerms=[{"id": SG_ID, "tags": TAGS}, {"tags": TAGS}]),
        id="sg-id-exclusive:quirk-not-all-bad",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"name": "a", "tags": TAGS}, {"name": "b"}]),
        id="sg-name-exclusive:quirk-not-all-bad",
    ),
    pytest.param(make(securityGroupSelectorTerms=[{"id": "my-sg-1"}]), id="sg-id-pattern:unanchored"),
    pytest.param(make(securityGroupSelectorTerms=[{"tags": many_tags(20)}]), id="sg-tags-maxProperties:20"),
    # subnetSelectorTerms
    pytest.param(make(subnetSelectorTerms=[{"id": f"subnet-{i}"} for i in range(30)]), id="subnet-maxItems:30"),
    pytest.param(make(subnetSelectorTerms=[{"id": SUBNET_ID}]), id="subnet-at-least-one:id"),
    pytest.param(
        make(subnetSelectorTerms=[{"id": SUBNET_ID, "tags": TAGS}, {"tags": TAGS}]),
        id="subnet-id-exclusive:quirk-not-all-bad",
    ),
    pytest.param(make(subnetSelectorTerms=[{"id": SUBNET_ID, "tags": {}}]), id="subnet-id-exclusive:empty-tags"),
    pytest.param(make(subnetSelectorTerms=[{"id": "subnet-0abc"}]), id="subnet-id-pattern"),
    pytest.param(make(subnetSelectorTerms=[{"tags": many_tags(20)}]), id="subnet-tags-maxProperties:20"),
    # spec.tags
    pytest.param(make(tags={"team": "platform", "cost-center": ""}), id="tags-empty-key:values-may-be-empty"),
    pytest.param(make(tags={"eks:other": "x"}), id="tags-eks-cluster-name:other-eks-key"),
    pytest.param(make(tags={"example.com/kubernetes.io/cluster": "x"}), id="tags-kubernetes-io-cluster:not-prefix"),
    pytest.param(make(tags={"karpenter.sh/nodepool-owner": "x"}), id="tags-nodepool:exact-match-only"),
    pytest.param(make(tags={"karpenter.sh/nodeclaims": "x"}), id="tags-nodeclaim:exact-match-only"),
    pytest.param(make(tags={"karpenter.k8s.aws/cluster": "x"}), id="tags-ec2nodeclass:exact-match-only"),
    # plain fields
    pytest.param(
        make(
            userData="#!/bin/bash\necho hi\n",
            detailedMonitoring=True,
            associatePublicIPAddress=False,
            context="c-123",
        ),
        id="plain-fields",
    ),
    pytest.param(make(userData="x" * E.USER_DATA_LIMIT), id="runtime-userData-size:limit"),
    # kubelet (v1.14.1)
    pytest.param(kubelet(clusterDNS=["10.100.0.10"], cpuCFSQuota=True), id="kubelet-clusterDNS-cpuCFSQuota"),
    pytest.param(kubelet(maxPods=0, podsPerCore=0), id="kubelet-maxPods-podsPerCore:minimum"),
    pytest.param(kubelet(maxPods=2**31 - 1), id="kubelet-maxPods:int32-max"),
    pytest.param(
        kubelet(systemReserved={"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"}),
        id="kubelet-systemReserved",
    ),
    pytest.param(kubelet(kubeReserved={"cpu": "0.5", "memory": "1e3"}), id="kubelet-kubeReserved"),
    pytest.param(
        kubelet(
            evictionHard={
                "memory.available": "5%",
                "nodefs.available": "10.5%",
                "nodefs.inodesFree": "100.00%",
                "imagefs.available": "1Gi",
                "imagefs.inodesFree": "0%",
                "pid.available": "+10",
            }
        ),
        id="kubelet-evictionHard",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "500Mi"}, evictionSoftGracePeriod={"memory.available": "1m30s"}),
        id="kubelet-evictionSoft-with-grace",
    ),
    pytest.param(kubelet(evictionSoft={}, evictionSoftGracePeriod={}), id="kubelet-owner-keys:both-empty"),
    pytest.param(
        kubelet(
            evictionSoft={"nodefs.available": "10%", "pid.available": "5%"},
            evictionSoftGracePeriod={"nodefs.available": "0", "pid.available": "1.5h"},
        ),
        id="kubelet-grace-durations",
    ),
    pytest.param(kubelet(evictionMaxPodGracePeriod=0), id="kubelet-evictionMaxPodGracePeriod:zero"),
    pytest.param(kubelet(imageGCHighThresholdPercent=100, imageGCLowThresholdPercent=0), id="kubelet-imageGC:bounds"),
    pytest.param(kubelet(imageGCHighThresholdPercent=85, imageGCLowThresholdPercent=80), id="kubelet-imageGC:ordered"),
]


@pytest.mark.parametrize("doc", ACCEPTED)
def test_accepted(doc):
    assert errors(doc) == []


# ---------------------------------------------------------------- CEL rules: exact path and message

CEL_REJECTED = [
    pytest.param(make(instanceProfile="KarpenterNodeInstanceProfile"), "spec", M_ROLE_XOR, id="role-xor-profile:both"),
    pytest.param(make(role=DROP), "spec", M_ROLE_XOR, id="role-xor-profile:neither"),
    pytest.param(ami([{"alias": "al2@latest"}], "AL2023"), "spec", M_FAMILY.format("AL2", "an"), id="family-al2"),
    pytest.param(ami(ALIAS, "AL2"), "spec", M_FAMILY.format("AL2023", "an"), id="family-al2023"),
    pytest.param(
        ami([{"alias": "bottlerocket@latest"}], "AL2023"),
        "spec",
        M_FAMILY.format("Bottlerocket", "a"),
        id="family-bottlerocket",
    ),
    pytest.param(
        ami([{"alias": "windows2019@latest"}], "Windows2022"),
        "spec",
        M_FAMILY.format("Windows2019", "a"),
        id="family-windows2019",
    ),
    pytest.param(
        ami([{"alias": "windows2022@latest"}], "Windows2025"),
        "spec",
        M_FAMILY.format("Windows2022", "a"),
        id="family-windows2022",
    ),
    pytest.param(
        ami([{"alias": "windows2025@latest"}], "Bottlerocket"),
        "spec",
        M_FAMILY.format("Windows2025", "a"),
        id="family-windows2025",
    ),
    pytest.param(ami(AMI_ID), "spec", M_NEED_FAMILY, id="need-family"),
    pytest.param(ami([{"owner": "self"}], "AL2023"), "spec.amiSelectorTerms[0]", M_AMI_ONE, id="ami-at-least-one"),
    pytest.param(
        ami([{"tags": TAGS}, {"tags": {}}], "AL2023"),
        "spec.amiSelectorTerms[1]",
        M_AMI_ONE,
        id="ami-at-least-one:empty-tags-quirk5",
    ),
    pytest.param(
        ami([{"id": "ami-1", "owner": "self"}], "AL2023"),
        "spec.amiSelectorTerms[0]",
        M_AMI_ID,
        id="ami-id-exclusive",
    ),
    pytest.param(
        ami([{"tags": TAGS}, {"id": "ami-1", "name": "n"}], "AL2023"),
        "spec.amiSelectorTerms[1]",
        M_AMI_ID,
        id="ami-id-exclusive:exists-one-bad-term",
    ),
    pytest.param(
        ami([{"alias": "al2023@latest", "owner": "amazon"}]),
        "spec.amiSelectorTerms[0]",
        M_AMI_ALIAS_FIELDS,
        id="ami-alias-fields",
    ),
    pytest.param(
        ami([{"alias": "al2023@latest"}, {"id": "ami-1"}]),
        "spec.amiSelectorTerms",
        M_AMI_ALIAS_TERMS,
        id="ami-alias-terms",
    ),
    pytest.param(
        ami([{"alias": "al2023"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_FORMAT,
        id="alias-format:no-version",
    ),
    pytest.param(
        ami([{"alias": "al2023@"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_FORMAT,
        id="alias-format:empty-version",
    ),
    pytest.param(
        ami([{"alias": "al2023@latest\n"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_FORMAT,
        id="alias-format:re2-end-of-text",
    ),
    pytest.param(
        ami([{"alias": "ubuntu@latest"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_FAMILY,
        id="alias-family:ubuntu",
    ),
    pytest.param(
        ami([{"alias": "AL2023@latest"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_FAMILY,
        id="alias-family:case-sensitive-quirk4",
    ),
    pytest.param(
        ami([{"alias": "windows2019@v2024"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_WINDOWS,
        id="alias-windows-latest",
    ),
    pytest.param(
        ami([{"alias": "windows2022"}]),
        "spec.amiSelectorTerms[0].alias",
        M_ALIAS_WINDOWS,
        id="alias-windows-latest:no-version-is-cel-error",
    ),
    pytest.param(
        ami([{"tags": {"Name": ""}}], "Custom"),
        "spec.amiSelectorTerms[0].tags[Name]",
        M_TAG_EMPTY,
        id="ami-tags-empty:value",
    ),
    pytest.param(
        ami([{"tags": {"": "x"}}], "Custom"),
        "spec.amiSelectorTerms[0].tags['']",
        M_TAG_EMPTY,
        id="ami-tags-empty:key",
    ),
    pytest.param(
        make(blockDeviceMappings=[{"rootVolume": True}, {"rootVolume": True}]),
        "spec.blockDeviceMappings",
        M_ROOT,
        id="bdm-one-root",
    ),
    pytest.param(ebs(volumeType="gp3"), "spec.blockDeviceMappings[0].ebs", M_EBS_SOURCE, id="ebs-source"),
    pytest.param(
        ebs(volumeSize="20Gi", volumeInitializationRate=200),
        "spec.blockDeviceMappings[0].ebs",
        M_EBS_INIT,
        id="ebs-init-rate:no-snapshot",
    ),
    pytest.param(
        ebs(snapshotID="", volumeSize="20Gi", volumeInitializationRate=200),
        "spec.blockDeviceMappings[0].ebs",
        M_EBS_INIT,
        id="ebs-init-rate:empty-snapshot",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"ownerID": "123456789012"}]),
        "spec.capacityReservationSelectorTerms[0]",
        M_CR_ONE,
        id="cr-at-least-one",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": "cr-1", "instanceMatchCriteria": "open"}]),
        "spec.capacityReservationSelectorTerms",
        M_CR_ID,
        id="cr-id-exclusive",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"tags": {"k": ""}}]),
        "spec.capacityReservationSelectorTerms[0].tags[k]",
        M_TAG_EMPTY,
        id="cr-tags-empty",
    ),
    pytest.param(make(connectionTracking={}), "spec.connectionTracking", M_CT, id="ct-at-least-one"),
    pytest.param(
        make(role=DROP, instanceProfile=""),
        "spec.instanceProfile",
        M_PROFILE_EMPTY,
        id="instanceProfile-not-empty",
    ),
    pytest.param(make(networkInterfaces=[nic(0, 1)]), "spec.networkInterfaces", M_NIC_PRIMARY, id="nic-primary"),
    pytest.param(
        make(networkInterfaces=[nic(0, 0, "efa-only")]),
        "spec.networkInterfaces",
        M_NIC_PRIMARY,
        id="nic-primary:efa-only",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(0, 0)]),
        "spec.networkInterfaces[1]",
        M_NIC_UNIQUE,
        id="nic-unique:duplicate-pair",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(1, 0, "efa-only"), nic(1, 1, "efa-only")]),
        "spec.networkInterfaces[2]",
        M_NIC_UNIQUE,
        id="nic-unique:two-efa-on-card",
    ),
    pytest.param(make(placementGroupSelector={}), "spec.placementGroupSelector", M_PG_ONE, id="pg-at-least-one"),
    pytest.param(
        make(placementGroupSelector={"name": "a", "id": "pg-1"}),
        "spec.placementGroupSelector",
        M_PG_XOR,
        id="pg-exclusive",
    ),
    pytest.param(make(role=""), "spec.role", M_ROLE_EMPTY, id="role-not-empty"),
    pytest.param(make(securityGroupSelectorTerms=[]), "spec.securityGroupSelectorTerms", M_SG_EMPTY, id="sg-not-empty"),
    pytest.param(
        make(securityGroupSelectorTerms=[{"tags": TAGS}, {}]),
        "spec.securityGroupSelectorTerms[1]",
        M_SG_ONE,
        id="sg-at-least-one",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"id": SG_ID, "name": "x"}]),
        "spec.securityGroupSelectorTerms",
        M_SG_ID,
        id="sg-id-exclusive",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"name": "x", "tags": TAGS}]),
        "spec.securityGroupSelectorTerms",
        M_SG_NAME,
        id="sg-name-exclusive",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"tags": {"": "x"}}]),
        "spec.securityGroupSelectorTerms[0].tags['']",
        M_TAG_EMPTY,
        id="sg-tags-empty",
    ),
    pytest.param(make(subnetSelectorTerms=[]), "spec.subnetSelectorTerms", M_SUBNET_EMPTY, id="subnet-not-empty"),
    pytest.param(make(subnetSelectorTerms=[{}]), "spec.subnetSelectorTerms[0]", M_SUBNET_ONE, id="subnet-at-least-one"),
    pytest.param(
        make(subnetSelectorTerms=[{"id": SUBNET_ID, "tags": TAGS}]),
        "spec.subnetSelectorTerms",
        M_SUBNET_ID,
        id="subnet-id-exclusive",
    ),
    pytest.param(
        make(subnetSelectorTerms=[{"tags": {"a": ""}}]),
        "spec.subnetSelectorTerms[0].tags[a]",
        M_TAG_EMPTY,
        id="subnet-tags-empty",
    ),
    pytest.param(make(tags={"": "x"}), "spec.tags['']", M_TAGS_EMPTY_KEY, id="tags-empty-key"),
    pytest.param(
        make(tags={"eks:eks-cluster-name": "x"}),
        "spec.tags['eks:eks-cluster-name']",
        M_TAGS_RESTRICTED.format("eks:eks-cluster-name"),
        id="tags-eks-cluster-name",
    ),
    pytest.param(
        make(tags={"kubernetes.io/cluster/my-cluster": "owned"}),
        "spec.tags[kubernetes.io/cluster/my-cluster]",
        M_TAGS_RESTRICTED.format("kubernetes.io/cluster/"),
        id="tags-kubernetes-io-cluster",
    ),
    pytest.param(
        make(tags={"kubernetes.io/clusterx": "owned"}),
        "spec.tags[kubernetes.io/clusterx]",
        M_TAGS_RESTRICTED.format("kubernetes.io/cluster/"),
        id="tags-kubernetes-io-cluster:no-slash-quirk3",
    ),
    pytest.param(
        make(tags={"karpenter.sh/nodepool": "x"}),
        "spec.tags[karpenter.sh/nodepool]",
        M_TAGS_RESTRICTED.format("karpenter.sh/nodepool"),
        id="tags-nodepool",
    ),
    pytest.param(
        make(tags={"karpenter.sh/nodeclaim": "x"}),
        "spec.tags[karpenter.sh/nodeclaim]",
        M_TAGS_RESTRICTED.format("karpenter.sh/nodeclaim"),
        id="tags-nodeclaim",
    ),
    pytest.param(
        make(tags={"karpenter.k8s.aws/ec2nodeclass": "x"}),
        "spec.tags[karpenter.k8s.aws/ec2nodeclass]",
        M_TAGS_RESTRICTED.format("karpenter.k8s.aws/ec2nodeclass"),
        id="tags-ec2nodeclass",
    ),
    # kubelet (v1.14.1)
    pytest.param(
        kubelet(imageGCHighThresholdPercent=80, imageGCLowThresholdPercent=80),
        "spec.kubelet",
        M_GC,
        id="kubelet-imageGC-ordered",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "10%"}),
        "spec.kubelet.evictionSoft[memory.available]",
        M_SOFT_NO_GRACE,
        id="kubelet-soft-needs-grace:absent",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "10%"}, evictionSoftGracePeriod={}),
        "spec.kubelet.evictionSoft[memory.available]",
        M_SOFT_NO_GRACE,
        id="kubelet-soft-needs-grace",
    ),
    pytest.param(
        kubelet(evictionSoft={}, evictionSoftGracePeriod={"pid.available": "1m"}),
        "spec.kubelet.evictionSoftGracePeriod[pid.available]",
        M_GRACE_NO_SOFT,
        id="kubelet-grace-needs-soft",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.free": "5%"}),
        "spec.kubelet.evictionHard[memory.free]",
        M_KEYS_SIGNAL.format("evictionHard"),
        id="kubelet-evictionHard-keys",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.free": "5%"}, evictionSoftGracePeriod={"memory.free": "1m"}),
        "spec.kubelet.evictionSoft[memory.free]",
        M_KEYS_SIGNAL.format("evictionSoft"),
        id="kubelet-evictionSoft-keys",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.free": "5%"}, evictionSoftGracePeriod={"memory.free": "1m"}),
        "spec.kubelet.evictionSoftGracePeriod[memory.free]",
        M_KEYS_SIGNAL.format("evictionSoftGracePeriod"),
        id="kubelet-evictionSoftGracePeriod-keys",
    ),
    pytest.param(
        kubelet(kubeReserved={"gpu": "1"}),
        "spec.kubelet.kubeReserved[gpu]",
        M_KEYS_RESERVED.format("kubeReserved"),
        id="kubelet-kubeReserved-keys",
    ),
    pytest.param(
        kubelet(kubeReserved={"cpu": "-100m"}),
        "spec.kubelet.kubeReserved[cpu]",
        M_NEGATIVE.format("kubeReserved"),
        id="kubelet-kubeReserved-negative",
    ),
    pytest.param(
        kubelet(systemReserved={"hugepages-2Mi": "1Gi"}),
        "spec.kubelet.systemReserved[hugepages-2Mi]",
        M_KEYS_RESERVED.format("systemReserved"),
        id="kubelet-systemReserved-keys",
    ),
    pytest.param(
        kubelet(systemReserved={"memory": "-1Gi"}),
        "spec.kubelet.systemReserved[memory]",
        M_NEGATIVE.format("systemReserved"),
        id="kubelet-systemReserved-negative",
    ),
]


@pytest.mark.parametrize(("doc", "path", "message"), CEL_REJECTED)
def test_cel_rejected(doc, path, message):
    found = errors(doc)
    assert (path, message) in found, found


# ---------------------------------------------------------------- OpenAPI constraints and runtime rules

SCHEMA_REJECTED = [
    pytest.param(
        make(amiSelectorTerms=DROP), "spec.amiSelectorTerms", "Required value", id="required:amiSelectorTerms"
    ),
    pytest.param(
        make(subnetSelectorTerms=DROP),
        "spec.subnetSelectorTerms",
        "Required value",
        id="required:subnetSelectorTerms",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=DROP),
        "spec.securityGroupSelectorTerms",
        "Required value",
        id="required:securityGroupSelectorTerms",
    ),
    pytest.param(make(amiFamily="Ubuntu"), "spec.amiFamily", "Unsupported value", id="amiFamily-enum:Ubuntu"),
    pytest.param(make(amiFamily="al2023"), "spec.amiFamily", "Unsupported value", id="amiFamily-enum:lower-case"),
    pytest.param(ami([], "AL2023"), "spec.amiSelectorTerms", "must have at least 1 items", id="ami-terms-minItems"),
    pytest.param(
        ami([{"id": f"ami-{i}"} for i in range(31)], "AL2023"),
        "spec.amiSelectorTerms",
        "must have at most 30 items",
        id="ami-terms-maxItems",
    ),
    pytest.param(
        ami([{"alias": "bottlerocket@v1.100.100-abcdef0"}]),
        "spec.amiSelectorTerms[0].alias",
        "Too long: may not be more than 30",
        id="alias-maxLength",
    ),
    pytest.param(ami([{"id": "ami-"}], "Custom"), "spec.amiSelectorTerms[0].id", "should match", id="ami-id-pattern"),
    pytest.param(
        ami([{"id": "AMI-123"}], "Custom"),
        "spec.amiSelectorTerms[0].id",
        "should match",
        id="ami-id-pattern:upper-case",
    ),
    pytest.param(
        ami([{"tags": many_tags(21)}], "Custom"),
        "spec.amiSelectorTerms[0].tags",
        "must have at most 20 items",
        id="ami-tags-maxProperties",
    ),
    pytest.param(
        make(blockDeviceMappings=[{"deviceName": f"/dev/xvd{i}"} for i in range(51)]),
        "spec.blockDeviceMappings",
        "must have at most 50 items",
        id="bdm-maxItems",
    ),
    pytest.param(
        ebs(snapshotID="snap-1", volumeInitializationRate=99),
        "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
        "greater than or equal to 100",
        id="ebs-init-rate:minimum",
    ),
    pytest.param(
        ebs(snapshotID="snap-1", volumeInitializationRate=301),
        "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
        "less than or equal to 300",
        id="ebs-init-rate:maximum",
    ),
    pytest.param(
        ebs(snapshotID="snap-1", volumeInitializationRate=2**31),
        "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
        "must fit in int32",
        id="ebs-init-rate:int32",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", iops=2**63),
        "spec.blockDeviceMappings[0].ebs.iops",
        "must fit in int64",
        id="ebs-iops:int64",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", iops="3000"),
        "spec.blockDeviceMappings[0].ebs.iops",
        "must be of type integer",
        id="ebs-iops:type",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", throughput=1.5),
        "spec.blockDeviceMappings[0].ebs.throughput",
        "must be of type integer",
        id="ebs-throughput:type",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", throughput=-(2**63) - 1),
        "spec.blockDeviceMappings[0].ebs.throughput",
        "must fit in int64",
        id="ebs-throughput:int64",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", volumeType="gp4"),
        "spec.blockDeviceMappings[0].ebs.volumeType",
        "Unsupported value",
        id="ebs-volumeType-enum",
    ),
    pytest.param(
        ebs(volumeSize="20Gi", encrypted="yes"),
        "spec.blockDeviceMappings[0].ebs.encrypted",
        "must be of type boolean",
        id="ebs-encrypted:type",
    ),
    *(
        pytest.param(
            ebs(volumeSize=size),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            "should match",
            id=f"volumeSize:{size}",
        )
        for size in (
            "18Ti",
            "59Ti",
            "65T",
            "59001Gi",
            "64001G",
            "0Gi",
            "1.5Gi",
            "100",
            "1m",
            "20Mi",
            "20gi",
            "",
        )
    ),
    pytest.param(
        ebs(volumeSize=20),
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "must be of type string",
        id="volumeSize:bare-number",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": f"cr-{i}"} for i in range(31)]),
        "spec.capacityReservationSelectorTerms",
        "must have at most 30 items",
        id="cr-maxItems",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": "xcr-123"}]),
        "spec.capacityReservationSelectorTerms[0].id",
        "should match",
        id="cr-id-pattern:anchored",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": "cr-ABC"}]),
        "spec.capacityReservationSelectorTerms[0].id",
        "should match",
        id="cr-id-pattern:upper-case",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"id": "cr-123\n"}]),
        "spec.capacityReservationSelectorTerms[0].id",
        "should match",
        id="cr-id-pattern:go-dollar-is-end-of-text",
    ),
    pytest.param(
        ebs(volumeSize="20Gi\n"),
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "should match",
        id="volumeSize:go-dollar-is-end-of-text",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"instanceMatchCriteria": "closed"}]),
        "spec.capacityReservationSelectorTerms[0].instanceMatchCriteria",
        "Unsupported value",
        id="cr-instanceMatchCriteria-enum",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"tags": TAGS, "ownerID": "12345678901"}]),
        "spec.capacityReservationSelectorTerms[0].ownerID",
        "should match",
        id="cr-ownerID-pattern:short",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"tags": TAGS, "ownerID": "1234567890123"}]),
        "spec.capacityReservationSelectorTerms[0].ownerID",
        "should match",
        id="cr-ownerID-pattern:long",
    ),
    pytest.param(
        make(capacityReservationSelectorTerms=[{"tags": many_tags(21)}]),
        "spec.capacityReservationSelectorTerms[0].tags",
        "must have at most 20 items",
        id="cr-tags-maxProperties",
    ),
    pytest.param(
        make(connectionTracking={"tcpEstablishedTimeout": 59}),
        "spec.connectionTracking.tcpEstablishedTimeout",
        "greater than or equal to 60",
        id="ct-tcp:minimum",
    ),
    pytest.param(
        make(connectionTracking={"tcpEstablishedTimeout": 432001}),
        "spec.connectionTracking.tcpEstablishedTimeout",
        "less than or equal to 432000",
        id="ct-tcp:maximum",
    ),
    pytest.param(
        make(connectionTracking={"tcpEstablishedTimeout": 2**31}),
        "spec.connectionTracking.tcpEstablishedTimeout",
        "must fit in int32",
        id="ct-tcp:int32",
    ),
    pytest.param(
        make(connectionTracking={"udpStreamTimeout": 59}),
        "spec.connectionTracking.udpStreamTimeout",
        "greater than or equal to 60",
        id="ct-udpStream:minimum",
    ),
    pytest.param(
        make(connectionTracking={"udpStreamTimeout": 181}),
        "spec.connectionTracking.udpStreamTimeout",
        "less than or equal to 180",
        id="ct-udpStream:maximum",
    ),
    pytest.param(
        make(connectionTracking={"udpTimeout": 29}),
        "spec.connectionTracking.udpTimeout",
        "greater than or equal to 30",
        id="ct-udp:minimum",
    ),
    pytest.param(
        make(connectionTracking={"udpTimeout": 61}),
        "spec.connectionTracking.udpTimeout",
        "less than or equal to 60",
        id="ct-udp:maximum",
    ),
    pytest.param(
        make(cpuOptions={"nestedVirtualization": "on"}),
        "spec.cpuOptions.nestedVirtualization",
        "Unsupported value",
        id="cpuOptions-enum",
    ),
    pytest.param(
        make(instanceStorePolicy="RAID1"),
        "spec.instanceStorePolicy",
        "Unsupported value",
        id="instanceStorePolicy-enum",
    ),
    pytest.param(
        make(ipPrefixCount=-1), "spec.ipPrefixCount", "greater than or equal to 0", id="ipPrefixCount-minimum"
    ),
    pytest.param(make(ipPrefixCount=2**31), "spec.ipPrefixCount", "must fit in int32", id="ipPrefixCount-int32"),
    pytest.param(
        make(metadataOptions={"httpEndpoint": "on"}),
        "spec.metadataOptions.httpEndpoint",
        "Unsupported value",
        id="metadataOptions-httpEndpoint-enum",
    ),
    pytest.param(
        make(metadataOptions={"httpProtocolIPv6": "yes"}),
        "spec.metadataOptions.httpProtocolIPv6",
        "Unsupported value",
        id="metadataOptions-httpProtocolIPv6-enum",
    ),
    pytest.param(
        make(metadataOptions={"httpPutResponseHopLimit": 0}),
        "spec.metadataOptions.httpPutResponseHopLimit",
        "greater than or equal to 1",
        id="metadataOptions-hop:minimum",
    ),
    pytest.param(
        make(metadataOptions={"httpPutResponseHopLimit": 65}),
        "spec.metadataOptions.httpPutResponseHopLimit",
        "less than or equal to 64",
        id="metadataOptions-hop:max",
    ),
    pytest.param(
        make(metadataOptions={"httpPutResponseHopLimit": 2**63}),
        "spec.metadataOptions.httpPutResponseHopLimit",
        "must fit in int64",
        id="metadataOptions-hop:int64",
    ),
    pytest.param(
        make(metadataOptions={"httpTokens": "disabled"}),
        "spec.metadataOptions.httpTokens",
        "Unsupported value",
        id="metadataOptions-httpTokens-enum",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, i) for i in range(151)]),
        "spec.networkInterfaces",
        "must have at most 150 items",
        id="nic-maxItems",
    ),
    pytest.param(
        make(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0}]),
        "spec.networkInterfaces[0].interfaceType",
        "Required value",
        id="nic-required:interfaceType",
    ),
    pytest.param(
        make(networkInterfaces=[{"networkCardIndex": 0, "interfaceType": "interface"}]),
        "spec.networkInterfaces[0].deviceIndex",
        "Required value",
        id="nic-required:deviceIndex",
    ),
    pytest.param(
        make(networkInterfaces=[{"deviceIndex": 0, "interfaceType": "interface"}]),
        "spec.networkInterfaces[0].networkCardIndex",
        "Required value",
        id="nic-required:networkCardIndex",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(0, -1)]),
        "spec.networkInterfaces[1].deviceIndex",
        "greater than or equal to 0",
        id="nic-deviceIndex-minimum",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(-1, 0)]),
        "spec.networkInterfaces[1].networkCardIndex",
        "greater than or equal to 0",
        id="nic-networkCardIndex-minimum",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(2**31, 0)]),
        "spec.networkInterfaces[1].networkCardIndex",
        "must fit in int32",
        id="nic-networkCardIndex-int32",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0), nic(0, 2**31)]),
        "spec.networkInterfaces[1].deviceIndex",
        "must fit in int32",
        id="nic-deviceIndex-int32",
    ),
    pytest.param(
        make(networkInterfaces=[nic(0, 0, "efa")]),
        "spec.networkInterfaces[0].interfaceType",
        "Unsupported value",
        id="nic-interfaceType-enum",
    ),
    pytest.param(
        make(placementGroupSelector={"id": "xpg-123"}),
        "spec.placementGroupSelector.id",
        "should match",
        id="pg-id-pattern:anchored",
    ),
    pytest.param(
        make(placementGroupSelector={"name": ""}),
        "spec.placementGroupSelector.name",
        "should be at least 1 chars long",
        id="pg-name-minLength",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"id": f"sg-{i}"} for i in range(31)]),
        "spec.securityGroupSelectorTerms",
        "must have at most 30 items",
        id="sg-maxItems",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"id": "sg_123"}]),
        "spec.securityGroupSelectorTerms[0].id",
        "should match",
        id="sg-id-pattern",
    ),
    pytest.param(
        make(securityGroupSelectorTerms=[{"tags": many_tags(21)}]),
        "spec.securityGroupSelectorTerms[0].tags",
        "must have at most 20 items",
        id="sg-tags-maxProperties",
    ),
    pytest.param(
        make(subnetSelectorTerms=[{"id": f"subnet-{i}"} for i in range(31)]),
        "spec.subnetSelectorTerms",
        "must have at most 30 items",
        id="subnet-maxItems",
    ),
    pytest.param(
        make(subnetSelectorTerms=[{"id": "subnet-"}]),
        "spec.subnetSelectorTerms[0].id",
        "should match",
        id="subnet-id-pattern",
    ),
    pytest.param(
        make(subnetSelectorTerms=[{"tags": many_tags(21)}]),
        "spec.subnetSelectorTerms[0].tags",
        "must have at most 20 items",
        id="subnet-tags-maxProperties",
    ),
    pytest.param(make(tags={"team": 1}), "spec.tags[team]", "must be of type string", id="tags-values:type"),
    pytest.param(
        make(detailedMonitoring="true"),
        "spec.detailedMonitoring",
        "must be of type boolean",
        id="detailedMonitoring:type",
    ),
    pytest.param(
        make(associatePublicIPAddress=1),
        "spec.associatePublicIPAddress",
        "must be of type boolean",
        id="associatePublicIPAddress:type",
    ),
    pytest.param(make(context=5), "spec.context", "must be of type string", id="context:type"),
    pytest.param(make(userData=["x"]), "spec.userData", "must be of type string", id="userData:type"),
    # kubelet (v1.14.1) OpenAPI
    pytest.param(
        kubelet(clusterDNS="10.100.0.10"),
        "spec.kubelet.clusterDNS",
        "must be of type array",
        id="kubelet-clusterDNS:type",
    ),
    pytest.param(
        kubelet(clusterDNS=[1]),
        "spec.kubelet.clusterDNS[0]",
        "must be of type string",
        id="kubelet-clusterDNS:item-type",
    ),
    pytest.param(
        kubelet(maxPods=-1),
        "spec.kubelet.maxPods",
        "greater than or equal to 0",
        id="kubelet-maxPods-minimum",
    ),
    pytest.param(kubelet(maxPods=2**31), "spec.kubelet.maxPods", "must fit in int32", id="kubelet-maxPods-int32"),
    pytest.param(kubelet(maxPods="110"), "spec.kubelet.maxPods", "must be of type integer", id="kubelet-maxPods:type"),
    pytest.param(
        kubelet(podsPerCore=-1),
        "spec.kubelet.podsPerCore",
        "greater than or equal to 0",
        id="kubelet-podsPerCore-minimum",
    ),
    pytest.param(
        kubelet(podsPerCore=2**31),
        "spec.kubelet.podsPerCore",
        "must fit in int32",
        id="kubelet-podsPerCore-int32",
    ),
    pytest.param(
        kubelet(systemReserved={"memory": "1GB"}),
        "spec.kubelet.systemReserved[memory]",
        "should match",
        id="kubelet-systemReserved-pattern",
    ),
    pytest.param(
        kubelet(kubeReserved={"cpu": "1 core"}),
        "spec.kubelet.kubeReserved[cpu]",
        "should match",
        id="kubelet-kubeReserved-pattern",
    ),
    pytest.param(
        kubelet(kubeReserved={"cpu": 1}),
        "spec.kubelet.kubeReserved[cpu]",
        "must be of type string",
        id="kubelet-kubeReserved:value-type",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.available": "101%"}),
        "spec.kubelet.evictionHard[memory.available]",
        "should match",
        id="kubelet-evictionHard-pattern:101%",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.available": "5 %"}),
        "spec.kubelet.evictionHard[memory.available]",
        "should match",
        id="kubelet-evictionHard-pattern:space",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "10.123%"}, evictionSoftGracePeriod={"memory.available": "1m"}),
        "spec.kubelet.evictionSoft[memory.available]",
        "should match",
        id="kubelet-evictionSoft-pattern",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "5%"}, evictionSoftGracePeriod={"memory.available": 60}),
        "spec.kubelet.evictionSoftGracePeriod[memory.available]",
        "must be of type string",
        id="kubelet-evictionSoftGracePeriod:value-type",
    ),
    pytest.param(
        kubelet(evictionMaxPodGracePeriod=2**31),
        "spec.kubelet.evictionMaxPodGracePeriod",
        "must fit in int32",
        id="kubelet-evictionMaxPodGracePeriod-int32",
    ),
    pytest.param(
        kubelet(imageGCHighThresholdPercent=101),
        "spec.kubelet.imageGCHighThresholdPercent",
        "less than or equal to 100",
        id="kubelet-imageGCHigh-maximum",
    ),
    pytest.param(
        kubelet(imageGCHighThresholdPercent=-1),
        "spec.kubelet.imageGCHighThresholdPercent",
        "greater than or equal to 0",
        id="kubelet-imageGCHigh-minimum",
    ),
    pytest.param(
        kubelet(imageGCLowThresholdPercent=101),
        "spec.kubelet.imageGCLowThresholdPercent",
        "less than or equal to 100",
        id="kubelet-imageGCLow-maximum",
    ),
    pytest.param(
        kubelet(imageGCLowThresholdPercent=-1),
        "spec.kubelet.imageGCLowThresholdPercent",
        "greater than or equal to 0",
        id="kubelet-imageGCLow-minimum",
    ),
    pytest.param(
        kubelet(imageGCLowThresholdPercent=2**31),
        "spec.kubelet.imageGCLowThresholdPercent",
        "must fit in int32",
        id="kubelet-imageGCLow-int32",
    ),
    pytest.param(
        kubelet(cpuCFSQuota="true"),
        "spec.kubelet.cpuCFSQuota",
        "must be of type boolean",
        id="kubelet-cpuCFSQuota:type",
    ),
    pytest.param(
        kubelet(evictionMinimumReclaim={"memory.available": "1Gi"}),
        "spec.kubelet.evictionMinimumReclaim",
        'unknown field "evictionMinimumReclaim"',
        id="kubelet-strict:unknown-field",
    ),
    # runtime rules (controller-side upstream, admission errors here)
    pytest.param(
        kubelet(registerWithTaints=[{"key": "a", "effect": "NoSchedule"}]),
        "spec.kubelet.registerWithTaints",
        "Karpenter owns registerWithTaints",
        id="runtime-registerWithTaints",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.available": ""}),
        "spec.kubelet.evictionHard[memory.available]",
        "non-negative quantity",
        id="runtime-eviction-threshold:empty",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.available": "-1Gi"}),
        "spec.kubelet.evictionHard[memory.available]",
        "non-negative quantity",
        id="runtime-eviction-threshold:negative",
    ),
    pytest.param(
        kubelet(evictionHard={"memory.available": "\u0665%"}),
        "spec.kubelet.evictionHard[memory.available]",
        "non-negative quantity",
        id="runtime-eviction-threshold:non-ascii-digit",
    ),
    pytest.param(
        kubelet(evictionSoft={"memory.available": "-5"}, evictionSoftGracePeriod={"memory.available": "1m"}),
        "spec.kubelet.evictionSoft[memory.available]",
        "non-negative quantity",
        id="runtime-eviction-threshold:soft-negative",
    ),
    *(
        pytest.param(
            kubelet(evictionSoft={"memory.available": "5%"}, evictionSoftGracePeriod={"memory.available": d}),
            "spec.kubelet.evictionSoftGracePeriod[memory.available]",
            "must be a non-negative duration",
            id=f"runtime-grace-duration:{d or 'empty'}",
        )
        for d in ("90", "-1m", "1d", "1m30", "", ".s", "1h 30m", "9999999999h")
    ),
    pytest.param(
        kubelet(evictionMaxPodGracePeriod=-1),
        "spec.kubelet.evictionMaxPodGracePeriod",
        "greater than or equal to 0",
        id="runtime-evictionMaxPodGracePeriod-minimum",
    ),
    pytest.param(
        make(userData="x" * (E.USER_DATA_LIMIT + 1)),
        "spec.userData",
        "EC2 limits user data",
        id="runtime-userData-size",
    ),
]


@pytest.mark.parametrize(("doc", "path", "fragment"), SCHEMA_REJECTED)
def test_schema_rejected(doc, path, fragment):
    found = errors(doc)
    assert any(p == path and fragment in m for p, m in found), found


# ---------------------------------------------------------------- seed, defaults, no spec


def test_seed_is_accepted_without_warnings():
    result = validate(copy.deepcopy(SEED))
    assert result.errors == []
    assert result.warnings == []
    assert result.kind == "EC2NodeClass" and result.name == "default"


METADATA_DEFAULT = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(DROP, METADATA_DEFAULT, id="absent-gets-whole-object"),
        pytest.param(None, METADATA_DEFAULT, id="null-gets-whole-object"),
        pytest.param({}, METADATA_DEFAULT, id="empty-gets-every-field"),
        pytest.param(
            {"httpTokens": "optional"},
            {**METADATA_DEFAULT, "httpTokens": "optional"},
            id="partial-keeps-given-field",
        ),
        pytest.param(
            {"httpPutResponseHopLimit": 2, "httpEndpoint": "disabled"},
            {**METADATA_DEFAULT, "httpPutResponseHopLimit": 2, "httpEndpoint": "disabled"},
            id="partial-two-fields",
        ),
    ],
)
def test_metadata_options_defaults(given, expected):
    doc = make(metadataOptions=given)
    before = copy.deepcopy(doc)
    assert default(doc)["spec"]["metadataOptions"] == expected
    assert doc == before  # default() works on a copy


def test_defaults_touch_nothing_else():
    defaulted = default(copy.deepcopy(SEED))
    assert set(defaulted["spec"]) == set(SEED["spec"]) | {"metadataOptions"}
    assert E.SPEC.properties["metadataOptions"].default == METADATA_DEFAULT


def test_the_schema_default_object_is_not_shared():
    first = default(make())
    first["spec"]["metadataOptions"]["httpTokens"] = "optional"
    assert default(make())["spec"]["metadataOptions"]["httpTokens"] == "required"


def test_no_spec_is_accepted_and_not_defaulted():
    doc = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "bare"}}
    assert errors(doc) == []
    assert "spec" not in default(doc)


def test_empty_spec_names_the_three_required_lists():
    found = errors(make(**dict.fromkeys(SEED["spec"], DROP)))
    for name in ("amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"):
        assert (f"spec.{name}", "Required value") in found
    assert ("spec", M_ROLE_XOR) in found


# ---------------------------------------------------------------- quirks


def test_quirk1_empty_subnet_list_yields_both_messages():
    found = errors(make(subnetSelectorTerms=[]))
    assert ("spec.subnetSelectorTerms", M_SUBNET_EMPTY) in found
    assert ("spec.subnetSelectorTerms", M_SUBNET_ID) in found
    assert ("spec.subnetSelectorTerms", M_SUBNET_ONE) not in found


def test_quirk1_empty_security_group_list_yields_three_messages():
    found = errors(make(securityGroupSelectorTerms=[]))
    assert [m for p, m in found if p == "spec.securityGroupSelectorTerms"] == [M_SG_EMPTY, M_SG_ID, M_SG_NAME]


def test_quirk1_empty_capacity_reservation_list_is_rejected():
    found = errors(make(capacityReservationSelectorTerms=[]))
    assert found == [("spec.capacityReservationSelectorTerms", M_CR_ID)]


@pytest.mark.parametrize(
    ("field", "terms", "message"),
    [
        pytest.param(
            "subnetSelectorTerms", [{"id": SUBNET_ID, "tags": TAGS}, {"tags": TAGS}], M_SUBNET_ID, id="subnet"
        ),
        pytest.param("securityGroupSelectorTerms", [{"id": SG_ID, "name": "x"}, {"id": SG_ID}], M_SG_ID, id="sg-id"),
        pytest.param(
            "securityGroupSelectorTerms", [{"name": "x", "id": SG_ID}, {"name": "y"}], M_SG_NAME, id="sg-name"
        ),
        pytest.param(
            "capacityReservationSelectorTerms",
            [{"id": "cr-1", "tags": TAGS}, {"id": "cr-2"}],
            M_CR_ID,
            id="capacity-reservation",
        ),
    ],
)
def test_quirk1_exclusivity_fires_only_when_every_term_is_bad(field, terms, message):
    assert errors(make(**{field: terms})) == []
    assert (f"spec.{field}", message) in errors(make(**{field: [terms[0]]}))
    assert (f"spec.{field}", message) in errors(make(**{field: [terms[0], terms[0]]}))


def test_quirk1_ami_rules_use_exists_and_name_each_bad_term():
    found = errors(ami([{"tags": TAGS}, {"id": "ami-1", "tags": TAGS}, {"id": "ami-2", "owner": "self"}], "Custom"))
    assert ("spec.amiSelectorTerms[1]", M_AMI_ID) in found
    assert ("spec.amiSelectorTerms[2]", M_AMI_ID) in found
    assert ("spec.amiSelectorTerms[0]", M_AMI_ID) not in found


def test_quirk2_volume_size_ti_branch():
    accepted = [n for n in range(1, 70) if not errors(ebs(volumeSize=f"{n}Ti"))]
    assert accepted == [*range(1, 18), *range(20, 28), *range(30, 38), *range(40, 48), *range(50, 59)]


def test_quirk3_cluster_tag_prefix_without_slash():
    assert errors(make(tags={"kubernetes.io/cluster": "owned"})) == [
        ("spec.tags[kubernetes.io/cluster]", M_TAGS_RESTRICTED.format("kubernetes.io/cluster/"))
    ]


def test_quirk4_alias_family_is_case_sensitive():
    found = errors(ami([{"alias": "Bottlerocket@latest"}]))
    assert ("spec.amiSelectorTerms[0].alias", M_ALIAS_FAMILY) in found
    assert ("spec.amiSelectorTerms[0].alias", M_ALIAS_FORMAT) not in found


@pytest.mark.parametrize(
    ("field", "path", "message"),
    [
        pytest.param("subnetSelectorTerms", "spec.subnetSelectorTerms[0]", M_SUBNET_ONE, id="subnet"),
        pytest.param("securityGroupSelectorTerms", "spec.securityGroupSelectorTerms[0]", M_SG_ONE, id="sg"),
        pytest.param(
            "capacityReservationSelectorTerms",
            "spec.capacityReservationSelectorTerms[0]",
            M_CR_ONE,
            id="capacity-reservation",
        ),
        pytest.param("amiSelectorTerms", "spec.amiSelectorTerms[0]", M_AMI_ONE, id="ami"),
    ],
)
def test_quirk5_empty_tags_map_counts_as_not_set(field, path, message):
    doc = make(**{field: [{"tags": {}}]}, amiFamily="Custom")
    assert (path, message) in errors(doc)


# ---------------------------------------------------------------- unknown fields and wrong types

UNKNOWN_FIELDS = [
    ("spec", lambda d: d["spec"]),
    ("spec.amiSelectorTerms[0]", lambda d: d["spec"]["amiSelectorTerms"][0]),
    ("spec.subnetSelectorTerms[0]", lambda d: d["spec"]["subnetSelectorTerms"][0]),
    ("spec.securityGroupSelectorTerms[0]", lambda d: d["spec"]["securityGroupSelectorTerms"][0]),
    (
        "spec.capacityReservationSelectorTerms[0]",
        lambda d: d["spec"].setdefault("capacityReservationSelectorTerms", [{"id": "cr-1"}])[0],
    ),
    ("spec.placementGroupSelector", lambda d: d["spec"].setdefault("placementGroupSelector", {"name": "pg"})),
    ("spec.blockDeviceMappings[0]", lambda d: d["spec"].setdefault("blockDeviceMappings", [{}])[0]),
    (
        "spec.blockDeviceMappings[0].ebs",
        lambda d: d["spec"].setdefault("blockDeviceMappings", [{"ebs": {"volumeSize": "20Gi"}}])[0]["ebs"],
    ),
    ("spec.networkInterfaces[0]", lambda d: d["spec"].setdefault("networkInterfaces", [nic(0, 0)])[0]),
    ("spec.metadataOptions", lambda d: d["spec"].setdefault("metadataOptions", {})),
    ("spec.connectionTracking", lambda d: d["spec"].setdefault("connectionTracking", {"udpTimeout": 30})),
    ("spec.cpuOptions", lambda d: d["spec"].setdefault("cpuOptions", {})),
    ("spec.kubelet", lambda d: d["spec"].setdefault("kubelet", {})),
]


@pytest.mark.parametrize(("path", "where"), [pytest.param(p, w, id=p) for p, w in UNKNOWN_FIELDS])
def test_unknown_field_is_an_error_naming_it(path, where):
    doc = copy.deepcopy(SEED)
    where(doc)["bogusField"] = "x"
    found = errors(doc)
    assert any(p == f"{path}.bogusField" and 'unknown field "bogusField"' in m for p, m in found), found


WRONG_TYPES = [
    pytest.param("amiSelectorTerms", "x", "spec.amiSelectorTerms", "array", id="amiSelectorTerms:string"),
    pytest.param(
        "amiSelectorTerms",
        ["al2023@latest"],
        "spec.amiSelectorTerms[0]",
        "object",
        id="amiSelectorTerms:item-string",
    ),
    pytest.param("amiSelectorTerms", [{"alias": 2023}], "spec.amiSelectorTerms[0].alias", "string", id="alias:number"),
    pytest.param(
        "subnetSelectorTerms",
        {"id": SUBNET_ID},
        "spec.subnetSelectorTerms",
        "array",
        id="subnetSelectorTerms:object",
    ),
    pytest.param(
        "securityGroupSelectorTerms",
        [SG_ID],
        "spec.securityGroupSelectorTerms[0]",
        "object",
        id="securityGroupSelectorTerms:item-string",
    ),
    pytest.param(
        "securityGroupSelectorTerms",
        [{"tags": ["a"]}],
        "spec.securityGroupSelectorTerms[0].tags",
        "object",
        id="sg-tags:list",
    ),
    pytest.param(
        "capacityReservationSelectorTerms",
        [None],
        "spec.capacityReservationSelectorTerms[0]",
        "object",
        id="cr:item-null",
    ),
    pytest.param("role", 5, "spec.role", "string", id="role:number"),
    pytest.param("amiFamily", ["AL2023"], "spec.amiFamily", "string", id="amiFamily:list"),
    pytest.param("tags", ["a"], "spec.tags", "object", id="tags:list"),
    pytest.param("kubelet", "maxPods=5", "spec.kubelet", "object", id="kubelet:string"),
    pytest.param(
        "kubelet",
        {"evictionSoft": "x", "evictionSoftGracePeriod": {}},
        "spec.kubelet.evictionSoft",
        "object",
        id="kubelet-evictionSoft:string",
    ),
    pytest.param(
        "kubelet",
        {"imageGCHighThresholdPercent": "90", "imageGCLowThresholdPercent": "80"},
        "spec.kubelet.imageGCHighThresholdPercent",
        "integer",
        id="kubelet-imageGC:strings",
    ),
    pytest.param("metadataOptions", "enabled", "spec.metadataOptions", "object", id="metadataOptions:string"),
    pytest.param("blockDeviceMappings", {}, "spec.blockDeviceMappings", "array", id="blockDeviceMappings:object"),
    pytest.param(
        "blockDeviceMappings",
        [{"rootVolume": "true"}, {"rootVolume": True}],
        "spec.blockDeviceMappings[0].rootVolume",
        "boolean",
        id="rootVolume:string",
    ),
    pytest.param(
        "networkInterfaces",
        [{"networkCardIndex": "0", "deviceIndex": 0, "interfaceType": "interface"}],
        "spec.networkInterfaces[0].networkCardIndex",
        "integer",
        id="networkCardIndex:string",
    ),
    pytest.param("networkInterfaces", ["eth0"], "spec.networkInterfaces[0]", "object", id="networkInterfaces:item"),
    pytest.param("ipPrefixCount", "2", "spec.ipPrefixCount", "integer", id="ipPrefixCount:string"),
    pytest.param("connectionTracking", [], "spec.connectionTracking", "object", id="connectionTracking:list"),
    pytest.param("placementGroupSelector", "pg", "spec.placementGroupSelector", "object", id="pg:string"),
]


@pytest.mark.parametrize(("field", "value", "path", "type_name"), WRONG_TYPES)
def test_wrong_type_is_a_clear_error_and_no_exception(field, value, path, type_name):
    found = errors(make(**{field: value}))
    assert any(p == path and f"must be of type {type_name}" in m for p, m in found), found
    # Rules over malformed children stay quiet: only type errors are reported.
    assert all("must be of type" in m or p == "spec" for p, m in found), found


def test_register_with_taints_gets_one_error_saying_karpenter_owns_it():
    assert errors(kubelet(registerWithTaints=[{"key": "a", "effect": "NoSchedule"}])) == [
        (
            "spec.kubelet.registerWithTaints",
            "Forbidden: Karpenter owns registerWithTaints; set taints or startupTaints on the NodePool",
        )
    ]


def test_spec_of_the_wrong_type():
    doc = copy.deepcopy(SEED)
    doc["spec"] = "x"
    assert errors(doc) == [("spec", 'Invalid value: "x": must be of type object, not string')]


# ---------------------------------------------------------------- transitions (UPDATE)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(make(), make(role=DROP, instanceProfile="KarpenterNodeInstanceProfile"), id="role-to-profile"),
        pytest.param(make(role=DROP, instanceProfile="p"), make(), id="profile-to-role"),
        pytest.param(make(role="old-role"), make(role="new-role"), id="role-changed"),
        pytest.param(
            {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}},
            make(),
            id="old-without-spec",
        ),
        pytest.param({**make(), "spec": "garbage"}, make(), id="old-spec-garbage"),
        pytest.param(make(amiSelectorTerms="x"), make(), id="old-invalid"),
    ],
)
def test_transitions_are_allowed_and_do_not_crash(old, new):
    assert errors(new, old) == []


def test_transition_still_validates_the_new_object():
    assert ("spec", M_ROLE_XOR) in errors(make(instanceProfile="p"), make())


# ---------------------------------------------------------------- warnings


def warnings(doc: dict[str, Any]) -> list[str]:
    return validate(doc).warnings


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        pytest.param(ami([{"alias": "al2@latest"}]), '"al2@latest"', id="al2-alias-latest"),
        pytest.param(ami([{"alias": "al2@v20240625"}], "AL2"), '"al2@v20240625"', id="al2-alias-pinned"),
        pytest.param(
            make(amiSelectorTerms=[{"alias": "bottlerocket@latest"}], kubelet={"podsPerCore": 4}),
            "podsPerCore 4",
            id="podsPerCore-bottlerocket-alias",
        ),
        pytest.param(
            make(amiSelectorTerms=AMI_ID, amiFamily="Bottlerocket", kubelet={"podsPerCore": 2}),
            "podsPerCore 2",
            id="podsPerCore-bottlerocket-family",
        ),
        pytest.param(
            kubelet(imageGCHighThresholdPercent=75), "imageGCHighThresholdPercent 75", id="imageGC-high-alone"
        ),
        pytest.param(kubelet(imageGCLowThresholdPercent=90), "imageGCLowThresholdPercent 90", id="imageGC-low-alone"),
        pytest.param(kubelet(clusterDNS=["10.100.0.10", "kube-dns"]), '"kube-dns"', id="clusterDNS-not-ip"),
        pytest.param(make(metadataOptions={"httpTokens": "optional"}), '"optional"', id="httpTokens-optional"),
        pytest.param(make(tags={"aws:createdBy": "me"}), '"aws:createdBy"', id="aws-tag-prefix"),
        pytest.param(make(tags={"AWS:x": "me"}), '"AWS:x"', id="aws-tag-prefix-upper"),
    ],
)
def test_warnings_name_the_offending_value(doc, needle):
    found = warnings(doc)
    assert any(needle in w for w in found), found
    assert all(len(w) < 120 for w in found), found


def test_al2_warning_text():
    assert warnings(ami([{"alias": "al2@latest"}])) == [
        'alias "al2@latest": AL2 aliases are rejected on EKS >= 1.33; consider al2023'
    ]


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(ami([{"alias": "al2023@v20240625"}]), id="pinned-al2023"),
        pytest.param(ami([{"alias": "bottlerocket@v1.20.0"}]), id="pinned-bottlerocket"),
        pytest.param(make(kubelet={"podsPerCore": 4}), id="podsPerCore-al2023"),
        pytest.param(kubelet(imageGCHighThresholdPercent=90), id="imageGC-high-above-default-low"),
        pytest.param(kubelet(imageGCLowThresholdPercent=70), id="imageGC-low-below-default-high"),
        pytest.param(kubelet(clusterDNS=["10.100.0.10", "fd00::a"]), id="clusterDNS-ips"),
        pytest.param(make(metadataOptions={"httpTokens": "required"}), id="httpTokens-required"),
        pytest.param(make(tags={"team": "a", "awsome": "b"}), id="ordinary-tags"),
    ],
)
def test_no_warning(doc):
    assert warnings(doc) == []


def test_long_values_are_cut_in_warnings():
    found = warnings(make(tags={"aws:" + "k" * 200: "v"}))
    assert len(found) == 1 and len(found[0]) < 120


# ---------------------------------------------------------------- helpers with upstream semantics


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("-0", 0),
        ("+5s", 5 * 10**9),
        ("1m30s", 90 * 10**9),
        ("1.5h", 5400 * 10**9),
        ("300ms", 3 * 10**8),
        ("1us", 1000),
        ("1µs", 1000),
        ("1h1h", 7200 * 10**9),
        ("1.s", 10**9),
        (".5s", 5 * 10**8),
        ("-1m", -60 * 10**9),
        ("90", None),
        ("1d", None),
        ("", None),
        ("s", None),
        ("1 s", None),
        ("9999999999h", None),
    ],
)
def test_go_duration(text, nanos):
    assert E.go_duration_nanos(text) == nanos


# ---------------------------------------------------------------- the schema carries every published rule


def _walk(node, path="spec"):
    yield path, node
    if isinstance(node, Object):
        for name, child in node.properties.items():
            yield from _walk(child, f"{path}.{name}")
    elif isinstance(node, Array):
        yield from _walk(node.items, f"{path}[]")
    elif isinstance(node, Map):
        yield from _walk(node.values, f"{path}{{*}}")


def _count(predicate, kubelet: bool | None = None) -> int:
    return sum(
        predicate(node) for path, node in _walk(E.SPEC) if kubelet is None or path.startswith("spec.kubelet") == kubelet
    )


@pytest.mark.parametrize(
    ("what", "predicate", "main", "v1141"),
    [
        pytest.param("CEL", lambda n: len(n.rules), 44, 54, id="cel"),
        pytest.param("enum", lambda n: isinstance(n, String) and bool(n.enum), 9, 9, id="enum"),
        pytest.param("minimum", lambda n: isinstance(n, Integer) and n.minimum is not None, 8, 12, id="minimum"),
        pytest.param("maximum", lambda n: isinstance(n, Integer) and n.maximum is not None, 5, 7, id="maximum"),
        pytest.param("pattern", lambda n: isinstance(n, String) and n.pattern is not None, 7, 11, id="pattern"),
        pytest.param("maxItems", lambda n: isinstance(n, Array) and n.max_items is not None, 6, 6, id="maxItems"),
        pytest.param("minItems", lambda n: isinstance(n, Array) and n.min_items is not None, 1, 1, id="minItems"),
        pytest.param("maxLength", lambda n: isinstance(n, String) and n.max_length is not None, 1, 1, id="maxLength"),
        pytest.param("minLength", lambda n: isinstance(n, String) and n.min_length is not None, 1, 1, id="minLength"),
        pytest.param(
            "maxProperties",
            lambda n: isinstance(n, Map) and n.max_properties is not None,
            4,
            4,
            id="maxProperties",
        ),
        pytest.param("required", lambda n: isinstance(n, Object) and bool(n.required), 2, 2, id="required"),
        pytest.param("format", lambda n: isinstance(n, Integer), 10, 15, id="format"),
        pytest.param("default", lambda n: n.default is not MISSING, 5, 5, id="default"),
    ],
)
def test_constraint_counts_match_the_published_crd(what, predicate, main, v1141):
    assert _count(predicate, kubelet=False) == main, what
    assert _count(predicate) == v1141, what


def test_published_cel_text_is_kept():
    cels = {rule.cel for _, node in _walk(E.SPEC) for rule in node.rules}
    assert "self.all(k, !k.startsWith('kubernetes.io/cluster') )" in cels
    assert "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1" in cels
    assert (
        "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  "
        "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true"
    ) in cels
    assert E.EBS.properties["volumeSize"].pattern == (
        "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|"
        "[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    )


def test_schema_renders_to_openapi():
    rendered = E.SPEC.openapi()
    assert rendered["required"] == ["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"]
    assert rendered["properties"]["metadataOptions"]["default"] == METADATA_DEFAULT
    assert "x-kubernetes-preserve-unknown-fields" not in rendered["properties"]["kubelet"]
    assert E.STATUS.preserve_unknown is True


# ---------------------------------------------------------------- karpweb's reservation prices annotation

PRICES = "karpweb.io/capacity-reservation-prices"


def priced(value: str) -> dict[str, Any]:
    doc = make(capacityReservationSelectorTerms=[{"id": "cr-0123abc"}])
    doc["metadata"]["annotations"] = {PRICES: value}
    return doc


def test_reservation_prices_annotation_accepted():
    assert errors(priced('{"cr-0123abc": 0.62, "cr-0456def": 0}')) == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("0.62", "expected a JSON object", id="not-an-object"),
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param('{"r-1": 0.62}', '"r-1" is not a capacity reservation id', id="bad-id"),
        pytest.param('{"cr-1": -1}', "cr-1: -1 is not a price", id="negative"),
        pytest.param('{"cr-1": "0.6"}', 'cr-1: "0.6" is not a price', id="string"),
    ],
)
def test_reservation_prices_annotation_rejected(value, fragment):
    [(path, message)] = errors(priced(value))
    assert path == f"metadata.annotations[{PRICES}]"
    assert fragment in message
