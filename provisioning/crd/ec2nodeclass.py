"""EC2NodeClass, karpenter.k8s.aws/v1: schema, defaults, CEL rules and runtime rules.

The schema is ``pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml`` at main
``1d927085`` (Part II, "EC2NodeClass validation rules" of the Karpenter reference), with
one product choice: ``spec.kubelet`` is the *typed* v1.14.1 block (10 more CEL rules),
validated at admission, instead of main's open map checked later by the controller.
Every CEL rule keeps its published expression and message; the Python check beside it
has the same meaning, quirks included (see the Quirks list in the reference).

Upstream's controller-side checks (``pkg/controllers/nodeclass/validation.go``) that go
beyond the CEL are errors here, in ``runtime_validate``: fail early, at ``kubectl apply``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from provisioning.crd.labels import QUANTITY_PATTERN
from provisioning.crd.schema import (
    Array,
    Boolean,
    Integer,
    Map,
    Object,
    Rule,
    String,
    Walk,
    each,
    each_key,
    has,
    key_path,
    show,
)
from provisioning.scheduling.quantity import QuantityError, parse_quantity

GROUP = "karpenter.k8s.aws"
VERSION = "v1"
KIND = "EC2NodeClass"
PLURAL = "ec2nodeclasses"

AMI_FAMILIES = ("AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025")
ALIAS_FAMILIES = ("al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025")
WINDOWS_ALIAS_FAMILIES = ("windows2019", "windows2022", "windows2025")
# The alias family each amiFamily corresponds to (case-sensitive, as upstream).
FAMILY_OF_ALIAS = {
    "al2": "AL2",
    "al2023": "AL2023",
    "bottlerocket": "Bottlerocket",
    "windows2019": "Windows2019",
    "windows2022": "Windows2022",
    "windows2025": "Windows2025",
}
VOLUME_TYPES = ("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3")

# Published verbatim. Quirk 2: the Ti branch accepts 1-9, 10-17, 20-27 ... 50-57 and 58
# only, and the empty alternatives (``[1-9]||``) make a bare "Ti" or "T" match.
VOLUME_SIZE_PATTERN = (
    r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|"
    r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|"
    r"([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
)
# v1.14.1 eviction thresholds: a percentage or a quantity. Published verbatim, including
# the empty alternative after "%|" (so "" matches; the runtime rules reject it).
EVICTION_PATTERN = (
    r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$"
)

EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
EVICTION_SIGNALS_CEL = (
    "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available',"
    "'imagefs.inodesFree','pid.available']"
)
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")

# Kubelet's own defaults, for the one-sided image GC warnings.
KUBELET_IMAGE_GC_HIGH = 85
KUBELET_IMAGE_GC_LOW = 80
# EC2 limits raw user data (before base64) to 16 KB; Karpenter's bootstrap adds more.
USER_DATA_LIMIT = 16384


# ------------------------------------------------------------------ helpers


# Rules also run above children already reported as malformed; a check then raises
# (TypeError here) instead of answering, so the framework keeps it quiet rather than
# adding a misleading second error. These helpers make the checks strict about types.


def _dicts(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise TypeError("not a list of objects")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def _integer(value: Any) -> int:
    """An integer as the schema admits it (1.0 included, as JSON numbers go)."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise TypeError("not an integer")
    return int(value)


def term_has(term: Any, name: str) -> bool:
    """CEL ``has(term.name)`` for a selector term.

    Product decision (Quirk 5): an empty ``tags: {}`` counts as NOT set. Go clients
    (kubectl plugins, the Karpenter test suite, controllers built on the typed API)
    drop an empty map through ``omitempty`` before the API server sees it, so a term
    ``{tags: {}}`` reaches Karpenter as ``{}`` and is rejected with "expected at least
    one, got none". We give raw YAML the same answer users get from Go clients.
    """
    if not has(_mapping(term), name):
        return False
    return not (name == "tags" and term[name] == {})


def each_entry(predicate: Callable[[str, Any], bool]) -> Callable[[dict[str, Any]], Iterable[str]]:
    """CEL ``self.all(k, P(k, self[k]))`` over a map; failing keys are named."""

    def check(mapping: dict[str, Any]) -> Iterable[str]:
        return [f"[{key_path(k)}]" for k, v in mapping.items() if not predicate(k, v)]

    return check


def alias_family_prefix(alias: str) -> str:
    """CEL ``alias.find('^[^@]+')``: the text before the first '@' ("" if none)."""
    match = re.match(r"[^@]+", alias)
    return match.group(0) if match else ""


def _alias_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    terms = spec.get("amiSelectorTerms")
    if not isinstance(terms, list):
        return []
    return [t for t in terms if isinstance(t, dict) and isinstance(t.get("alias"), str)]


def effective_ami_family(spec: dict[str, Any]) -> str | None:
    """``EC2NodeClass.AMIFamily()``: spec.amiFamily, else the alias family."""
    family = spec.get("amiFamily")
    if isinstance(family, str):
        return family
    for term in _alias_terms(spec):
        mapped = FAMILY_OF_ALIAS.get(term["alias"].split("@")[0])
        if mapped:
            return mapped
    return None


# ------------------------------------------------------------------ spec-level CEL


def _family_rule(alias_family: str, ami_family: str) -> Rule:
    cel = (
        f"!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && "
        f"x.alias.find('^[^@]+') == '{alias_family}') ? (self.amiFamily == 'Custom' || "
        f"self.amiFamily == '{ami_family}') : true)"
    )
    article = "an" if ami_family[0] in "AEIOU" else "a"
    message = f"if set, amiFamily must be '{ami_family}' or 'Custom' when using {article} {ami_family} alias"

    def check(spec: dict[str, Any]) -> bool:
        if not has(spec, "amiFamily"):
            return True
        uses = any(
            has(x, "alias") and alias_family_prefix(x["alias"]) == alias_family
            for x in _dicts(spec["amiSelectorTerms"])
        )
        return spec["amiFamily"] in ("Custom", ami_family) if uses else True

    return Rule(cel, message, check)


SPEC_RULES = (
    Rule(
        "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
        "must specify exactly one of ['role', 'instanceProfile']",
        lambda s: has(s, "role") != has(s, "instanceProfile"),
    ),
    *(_family_rule(alias, FAMILY_OF_ALIAS[alias]) for alias in ALIAS_FAMILIES),
    Rule(
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
        lambda s: any(has(x, "alias") for x in _dicts(s["amiSelectorTerms"])) or has(s, "amiFamily"),
    ),
)


# ------------------------------------------------------------------ selector terms

TAG_ENTRY_RULE = Rule(
    "self.all(k, k != '' && self[k] != '')",
    "empty tag keys or values aren't supported",
    each_entry(lambda k, v: k != "" and v != ""),
)


def _selector_tags() -> Map:
    return Map(
        description="Tags to select by; '*' as a value selects any value for the key.",
        values=String(),
        max_properties=20,
        rules=(TAG_ENTRY_RULE,),
    )


def _any_of(*names: str) -> Callable[[Any], bool]:
    return lambda x: any(term_has(x, n) for n in names)


def _id_with(*others: str) -> Callable[[Any], bool]:
    return lambda x: term_has(x, "id") and any(term_has(x, n) for n in others)


def _not_all(bad: Callable[[Any], bool]) -> Callable[[list[Any]], bool]:
    """CEL ``!self.all(x, bad(x))``: fails only when EVERY term is bad (Quirk 1), and
    on an empty list, where ``all`` is vacuously true."""
    return lambda items: not all(bad(x) for x in items)


def _alias_format_ok(alias: str) -> bool:
    # RE2 semantics: '$' is end of text ('\Z' here), '.' does not match a newline.
    return re.search(r"^[a-zA-Z0-9]+@.+\Z", alias) is not None


AMI_SELECTOR_TERM = Object(
    description="One AMI selector term; its fields are ANDed.",
    properties={
        "alias": String(
            description="family@version of an EKS-optimized AMI, e.g. al2023@latest.",
            max_length=30,
            rules=(
                Rule(
                    "self.matches('^[a-zA-Z0-9]+@.+$')",
                    "'alias' is improperly formatted, must match the format 'family@version'",
                    _alias_format_ok,
                ),
                Rule(
                    "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
                    "family is not supported, must be one of the following: 'al2', 'al2023', "
                    "'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
                    lambda a: a.split("@")[0] in ALIAS_FAMILIES,
                ),
                Rule(
                    "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? "
                    "self.split('@')[1] == 'latest' : true",
                    "windows families may only specify version 'latest'",
                    # split('@')[1] on an alias without '@' is a CEL error: IndexError here.
                    lambda a: a.split("@")[1] == "latest" if a.split("@")[0] in WINDOWS_ALIAS_FAMILIES else True,
                ),
            ),
        ),
        "id": String(description="AMI id.", pattern=r"ami-[0-9a-z]+"),
        "name": String(description="EC2 image name (not the Name tag); EC2 filter wildcards apply."),
        "owner": String(description="Account id, self, amazon or aws-marketplace."),
        "ssmParameter": String(description="Name or ARN of an SSM parameter holding an AMI id."),
        "tags": _selector_tags(),
    },
)

AMI_SELECTOR_TERMS = Array(
    description="AMI selector terms, ORed.",
    items=AMI_SELECTOR_TERM,
    max_items=30,
    min_items=1,
    rules=(
        Rule(
            "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
            "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            each(_any_of("tags", "id", "name", "alias", "ssmParameter")),
        ),
        # '!self.exists(x, bad)' is 'self.all(x, !bad)': the bad terms are named.
        Rule(
            "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            each(lambda x: not _id_with("alias", "tags", "name", "owner")(x)),
        ),
        Rule(
            "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
            "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            each(lambda x: not (term_has(x, "alias") and _any_of("id", "tags", "name", "owner")(x))),
        ),
        Rule(
            "!(self.exists(x, has(x.alias)) && self.size() != 1)",
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            lambda terms: not (any(term_has(x, "alias") for x in terms) and len(terms) != 1),
        ),
    ),
)

SUBNET_SELECTOR_TERMS = Array(
    description="Subnet selector terms, ORed.",
    items=Object(
        properties={
            "id": String(description="Subnet id.", pattern=r"subnet-[0-9a-z]+"),
            "tags": _selector_tags(),
        },
    ),
    max_items=30,
    rules=(
        Rule("self.size() != 0", "subnetSelectorTerms cannot be empty", lambda terms: len(terms) != 0),
        Rule(
            "self.all(x, has(x.tags) || has(x.id))",
            "expected at least one, got none, ['tags', 'id']",
            each(_any_of("tags", "id")),
        ),
        Rule(
            "!self.all(x, has(x.id) && has(x.tags))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            _not_all(_id_with("tags")),
        ),
    ),
)

SECURITY_GROUP_SELECTOR_TERMS = Array(
    description="Security group selector terms, ORed.",
    items=Object(
        properties={
            "id": String(description="Security group id.", pattern=r"sg-[0-9a-z]+"),
            "name": String(description="Security group name (not the Name tag)."),
            "tags": _selector_tags(),
        },
    ),
    max_items=30,
    rules=(
        Rule(
            "self.size() != 0",
            "securityGroupSelectorTerms cannot be empty",
            lambda terms: len(terms) != 0,
        ),
        Rule(
            "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
            "expected at least one, got none, ['tags', 'id', 'name']",
            each(_any_of("tags", "id", "name")),
        ),
        Rule(
            "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a security "
            "group selector term",
            _not_all(_id_with("tags", "name")),
        ),
        Rule(
            "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
            "'name' is mutually exclusive, cannot be set with a combination of other fields in a security "
            "group selector term",
            _not_all(lambda x: term_has(x, "name") and _any_of("tags", "id")(x)),
        ),
    ),
)

CAPACITY_RESERVATION_SELECTOR_TERMS = Array(
    description="Capacity reservation selector terms, ORed.",
    items=Object(
        properties={
            "id": String(description="Capacity reservation id.", pattern=r"^cr-[0-9a-z]+$"),
            "instanceMatchCriteria": String(enum=("open", "targeted")),
            "ownerID": String(description="Owning account id.", pattern=r"^[0-9]{12}$"),
            "tags": _selector_tags(),
        },
    ),
    max_items=30,
    rules=(
        Rule(
            "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
            "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            each(_any_of("tags", "id", "instanceMatchCriteria")),
        ),
        Rule(
            "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
            "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            _not_all(_id_with("tags", "ownerID", "instanceMatchCriteria")),
        ),
    ),
)

PLACEMENT_GROUP_SELECTOR = Object(
    description="The placement group to launch into, by name or id.",
    properties={
        "id": String(pattern=r"^pg-[0-9a-z]+$"),
        "name": String(min_length=1),
    },
    rules=(
        Rule(
            "has(self.name) || has(self.id)",
            "expected at least one, got none, ['name', 'id']",
            lambda s: has(s, "name") or has(s, "id"),
        ),
        Rule(
            "!(has(self.name) && has(self.id))",
            "'name' and 'id' are mutually exclusive",
            lambda s: not (has(s, "name") and has(s, "id")),
        ),
    ),
)


# ------------------------------------------------------------------ block devices, ENIs


def _one_root_volume(mappings: list[dict[str, Any]]) -> bool:
    return sum(1 for x in _dicts(mappings) if has(x, "rootVolume") and x["rootVolume"] is True) <= 1


EBS = Object(
    description="EBS volume parameters.",
    properties={
        "deleteOnTermination": Boolean(),
        "encrypted": Boolean(),
        "iops": Integer(format="int64"),
        "kmsKeyID": String(description="KMS key ARN used for encryption."),
        "snapshotID": String(),
        "throughput": Integer(format="int64"),
        "volumeInitializationRate": Integer(minimum=100, maximum=300, format="int32"),
        "volumeSize": String(description="Size in Gi, G, Ti or T.", pattern=VOLUME_SIZE_PATTERN),
        "volumeType": String(enum=VOLUME_TYPES),
    },
    rules=(
        Rule(
            "has(self.snapshotID) || has(self.volumeSize)",
            "snapshotID or volumeSize must be defined",
            lambda e: has(e, "snapshotID") or has(e, "volumeSize"),
        ),
        Rule(
            "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
            "snapshotID must be set when volumeInitializationRate is set",
            lambda e: not has(e, "volumeInitializationRate") or (has(e, "snapshotID") and e["snapshotID"] != ""),
        ),
    ),
)

BLOCK_DEVICE_MAPPINGS = Array(
    description="Block devices; the AMI family's defaults apply when omitted.",
    items=Object(
        properties={
            "deviceName": String(description="Device name, e.g. /dev/xvda."),
            "ebs": EBS,
            "rootVolume": Boolean(description="This device holds the kubelet root dir."),
        },
    ),
    max_items=50,
    rules=(
        Rule(
            "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume",
            _one_root_volume,
        ),
    ),
)


def _interfaces(items: Any) -> list[dict[str, Any]]:
    for x in _dicts(items):
        _integer(x["deviceIndex"])
        _integer(x["networkCardIndex"])
        if not isinstance(x["interfaceType"], str):
            raise TypeError("interfaceType is not a string")
    return items


def _has_primary_interface(items: list[dict[str, Any]]) -> bool:
    items = _interfaces(items)
    return len(items) == 0 or any(
        x["deviceIndex"] == 0 and x["networkCardIndex"] == 0 and x["interfaceType"] == "interface" for x in items
    )


def _unique_interfaces(items: list[dict[str, Any]]) -> Iterable[str]:
    items = _interfaces(items)

    def ok(x: dict[str, Any]) -> bool:
        same_slot = [
            y for y in items if x["networkCardIndex"] == y["networkCardIndex"] and x["deviceIndex"] == y["deviceIndex"]
        ]
        efa_on_card = [
            y for y in items if x["networkCardIndex"] == y["networkCardIndex"] and y["interfaceType"] == "efa-only"
        ]
        return len(same_slot) == 1 and (x["interfaceType"] != "efa-only" or len(efa_on_card) == 1)

    return [f"[{i}]" for i, x in enumerate(items) if not ok(x)]


NETWORK_INTERFACES = Array(
    description="Network interfaces to attach; overrides the EFA count.",
    items=Object(
        properties={
            "deviceIndex": Integer(minimum=0, format="int32"),
            "interfaceType": String(enum=("interface", "efa-only")),
            "networkCardIndex": Integer(minimum=0, format="int32"),
        },
        required=("deviceIndex", "interfaceType", "networkCardIndex"),
    ),
    max_items=150,
    rules=(
        Rule(
            "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && "
            "x.interfaceType == 'interface')",
            "networkInterfaces must include a primary interface with interfaceType='interface'",
            _has_primary_interface,
        ),
        Rule(
            "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && "
            "x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || "
            "self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only')"
            ".size() == 1))",
            "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can "
            "have at most one efa device per network card",
            _unique_interfaces,
        ),
    ),
)


# ------------------------------------------------------------------ kubelet (v1.14.1, typed)


def _signal_keys_rule(field: str) -> Rule:
    return Rule(
        f"self.all(x, x in {EVICTION_SIGNALS_CEL})",
        f"valid keys for {field} are {EVICTION_SIGNALS_CEL}",
        each_key(lambda k: k in EVICTION_SIGNALS),
    )


def _eviction_thresholds(field: str, description: str) -> Map:
    return Map(
        description=description,
        values=String(pattern=EVICTION_PATTERN),
        rules=(_signal_keys_rule(field),),
    )


def _reserved(field: str, description: str) -> Map:
    return Map(
        description=description,
        values=String(pattern=QUANTITY_PATTERN),
        rules=(
            Rule(
                "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')",
                f"valid keys for {field} are ['cpu','memory','ephemeral-storage','pid']",
                each_key(lambda k: k in RESERVED_RESOURCES),
            ),
            Rule(
                "self.all(x, !self[x].startsWith('-'))",
                f"{field} value cannot be a negative resource quantity",
                each_entry(lambda k, v: not v.startswith("-")),
            ),
        ),
    )


def _keys_matched(field: str, other: str) -> Callable[[dict[str, Any]], bool | Iterable[str]]:
    """``has(self.F) ? self.F.all(e, e in self.O) : true``; unmatched keys are named.

    Upstream, a missing ``self.O`` is a CEL evaluation error that rejects the object;
    here every key of F is then named as unmatched (same verdict, clearer place).
    """

    def check(kubelet: dict[str, Any]) -> bool | Iterable[str]:
        if not has(kubelet, field):
            return True
        matches = _mapping(kubelet[other]) if has(kubelet, other) else {}
        return [f".{field}[{key_path(e)}]" for e in _mapping(kubelet[field]) if e not in matches]

    return check


def _image_gc_ordered(kubelet: dict[str, Any]) -> bool:
    if has(kubelet, "imageGCHighThresholdPercent") and has(kubelet, "imageGCLowThresholdPercent"):
        high = _integer(kubelet["imageGCHighThresholdPercent"])
        return high > _integer(kubelet["imageGCLowThresholdPercent"])
    return True


KUBELET = Object(
    description="Kubelet settings for provisioned nodes (the typed v1.14.1 block).",
    properties={
        "clusterDNS": Array(description="Cluster DNS server IPs.", items=String()),
        "maxPods": Integer(minimum=0, format="int32"),
        "podsPerCore": Integer(minimum=0, format="int32"),
        "systemReserved": _reserved("systemReserved", "Resources reserved for OS daemons."),
        "kubeReserved": _reserved("kubeReserved", "Resources reserved for Kubernetes daemons."),
        "evictionHard": _eviction_thresholds("evictionHard", "Hard eviction thresholds by signal."),
        "evictionSoft": _eviction_thresholds("evictionSoft", "Soft eviction thresholds by signal."),
        "evictionSoftGracePeriod": Map(
            description="Grace period (a duration) for each soft eviction signal.",
            values=String(),
            rules=(_signal_keys_rule("evictionSoftGracePeriod"),),
        ),
        "evictionMaxPodGracePeriod": Integer(format="int32"),
        "imageGCHighThresholdPercent": Integer(minimum=0, maximum=100, format="int32"),
        "imageGCLowThresholdPercent": Integer(minimum=0, maximum=100, format="int32"),
        "cpuCFSQuota": Boolean(),
    },
    rules=(
        Rule(
            "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  "
            "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
            "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            _image_gc_ordered,
        ),
        Rule(
            "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
            "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            _keys_matched("evictionSoft", "evictionSoftGracePeriod"),
        ),
        Rule(
            "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
            "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            _keys_matched("evictionSoftGracePeriod", "evictionSoft"),
        ),
    ),
)


# ------------------------------------------------------------------ tags, metadata, the rest

SPEC_TAGS = Map(
    description="Tags applied to instances, volumes, launch templates and ENIs.",
    values=String(),
    rules=(
        Rule("self.all(k, k != '')", "empty tag keys aren't supported", each_key(lambda k: k != "")),
        Rule(
            "self.all(k, k !='eks:eks-cluster-name')",
            "tag contains a restricted tag matching eks:eks-cluster-name",
            each_key(lambda k: k != "eks:eks-cluster-name"),
        ),
        Rule(  # Quirk 3: no trailing slash in the rule, although the message has one.
            "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
            "tag contains a restricted tag matching kubernetes.io/cluster/",
            each_key(lambda k: not k.startswith("kubernetes.io/cluster")),
        ),
        Rule(
            "self.all(k, k != 'karpenter.sh/nodepool')",
            "tag contains a restricted tag matching karpenter.sh/nodepool",
            each_key(lambda k: k != "karpenter.sh/nodepool"),
        ),
        Rule(
            "self.all(k, k !='karpenter.sh/nodeclaim')",
            "tag contains a restricted tag matching karpenter.sh/nodeclaim",
            each_key(lambda k: k != "karpenter.sh/nodeclaim"),
        ),
        Rule(
            "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
            "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
            each_key(lambda k: k != "karpenter.k8s.aws/ec2nodeclass"),
        ),
    ),
)

METADATA_OPTIONS_DEFAULT = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}

METADATA_OPTIONS = Object(
    description="Instance Metadata Service exposure for the launch template.",
    default=METADATA_OPTIONS_DEFAULT,
    properties={
        "httpEndpoint": String(enum=("enabled", "disabled"), default="enabled"),
        "httpProtocolIPv6": String(enum=("enabled", "disabled"), default="disabled"),
        "httpPutResponseHopLimit": Integer(minimum=1, maximum=64, format="int64", default=1),
        "httpTokens": String(enum=("required", "optional"), default="required"),
    },
)

CONNECTION_TRACKING = Object(
    description="Connection tracking timeouts; restricts instance types to Nitro.",
    properties={
        "tcpEstablishedTimeout": Integer(minimum=60, maximum=432000, format="int32"),
        "udpStreamTimeout": Integer(minimum=60, maximum=180, format="int32"),
        "udpTimeout": Integer(minimum=30, maximum=60, format="int32"),
    },
    rules=(
        Rule(
            "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
            lambda c: has(c, "tcpEstablishedTimeout") or has(c, "udpStreamTimeout") or has(c, "udpTimeout"),
        ),
    ),
)

SPEC = Object(
    description="How Karpenter launches EC2 instances: AMIs, network, IAM, storage, kubelet.",
    properties={
        "amiFamily": String(
            description="UserData format and default block devices; optional with an alias term.",
            enum=AMI_FAMILIES,
        ),
        "amiSelectorTerms": AMI_SELECTOR_TERMS,
        "subnetSelectorTerms": SUBNET_SELECTOR_TERMS,
        "securityGroupSelectorTerms": SECURITY_GROUP_SELECTOR_TERMS,
        "capacityReservationSelectorTerms": CAPACITY_RESERVATION_SELECTOR_TERMS,
        "placementGroupSelector": PLACEMENT_GROUP_SELECTOR,
        "role": String(
            description="IAM role for nodes; Karpenter manages the instance profile.",
            rules=(Rule("self != ''", "role cannot be empty", lambda v: v != ""),),
        ),
        "instanceProfile": String(
            description="A pre-existing instance profile (exclusive with role).",
            rules=(Rule("self != ''", "instanceProfile cannot be empty", lambda v: v != ""),),
        ),
        "userData": String(description="Merged with Karpenter's bootstrap (verbatim for Custom)."),
        "tags": SPEC_TAGS,
        "kubelet": KUBELET,
        "blockDeviceMappings": BLOCK_DEVICE_MAPPINGS,
        "instanceStorePolicy": String(description="RAID0 all local NVMe disks.", enum=("RAID0",)),
        "networkInterfaces": NETWORK_INTERFACES,
        "ipPrefixCount": Integer(minimum=0, format="int32"),
        "associatePublicIPAddress": Boolean(),
        "detailedMonitoring": Boolean(),
        "metadataOptions": METADATA_OPTIONS,
        "connectionTracking": CONNECTION_TRACKING,
        "cpuOptions": Object(
            properties={"nestedVirtualization": String(enum=("enabled", "disabled"))},
        ),
        "context": String(description="CreateFleet Context (reserved EC2 field)."),
    },
    required=("amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"),
    rules=SPEC_RULES,
)

STATUS = Object(preserve_unknown=True)


# ------------------------------------------------------------------ runtime rules

_GO_DURATION = re.compile(r"[-+]?(0|(([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)")
_GO_DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_NANOS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_PERCENT = re.compile(r"(\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%", re.ASCII)


def go_duration_nanos(text: str) -> int | None:
    """Go ``time.ParseDuration``: nanoseconds, or None when Go would reject the text."""
    if not _GO_DURATION.fullmatch(text):
        return None
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    total = Decimal(0)
    if body != "0":
        for number, unit in _GO_DURATION_PART.findall(body):
            total += Decimal(number) * _NANOS[unit]
    nanos = int(total) * sign
    return nanos if -(2**63) <= nanos <= 2**63 - 1 else None


def _threshold_ok(value: str) -> bool:
    """0-100% or a non-negative quantity (the controller's eviction threshold check)."""
    if _PERCENT.fullmatch(value):
        return True
    try:
        return parse_quantity(value) >= 0
    except QuantityError:
        return False


def runtime_validate(spec: dict[str, Any], walk: Walk) -> None:
    """The controller's checks beyond the CEL (errors here), plus our warnings."""
    kubelet = spec.get("kubelet")
    if isinstance(kubelet, dict):
        _validate_kubelet(kubelet, effective_ami_family(spec), walk)
    user_data = spec.get("userData")
    if isinstance(user_data, str) and len(user_data.encode()) > USER_DATA_LIMIT:
        walk.error(
            "spec.userData",
            f"Too long: {len(user_data.encode())} bytes: EC2 limits user data to {USER_DATA_LIMIT} bytes "
            "before base64, and Karpenter's bootstrap is added to it",
        )
    _warn(spec, walk)


def _validate_kubelet(kubelet: dict[str, Any], family: str | None, walk: Walk) -> None:
    if "registerWithTaints" in kubelet:
        # The strict schema already called it an unknown field; say why instead.
        path = "spec.kubelet.registerWithTaints"
        walk.errors[:] = [e for e in walk.errors if not (e.path == path and e.message.startswith("unknown field"))]
        walk.error(path, "Forbidden: Karpenter owns registerWithTaints; set taints or startupTaints on the NodePool")
    for field in ("evictionHard", "evictionSoft"):
        thresholds = kubelet.get(field)
        if not isinstance(thresholds, dict):
            continue
        for signal, value in thresholds.items():
            if isinstance(value, str) and not _threshold_ok(value):
                walk.error(
                    f"spec.kubelet.{field}[{key_path(signal)}]",
                    f"Invalid value: {show(value)}: must be a percentage from 0% to 100% or a non-negative quantity",
                )
    periods = kubelet.get("evictionSoftGracePeriod")
    if isinstance(periods, dict):
        for signal, value in periods.items():
            if not isinstance(value, str):
                continue
            nanos = go_duration_nanos(value)
            if nanos is None or nanos < 0:
                walk.error(
                    f"spec.kubelet.evictionSoftGracePeriod[{key_path(signal)}]",
                    f"Invalid value: {show(value)}: must be a non-negative duration like 30s, 1m30s or 2h",
                )
    grace = _int(kubelet.get("evictionMaxPodGracePeriod"))
    if grace is not None and grace < 0:
        walk.error(
            "spec.kubelet.evictionMaxPodGracePeriod",
            f"Invalid value: {grace}: should be greater than or equal to 0",
        )
    _warn_kubelet(kubelet, family, walk)


def _int(value: Any) -> int | None:
    try:
        return _integer(value)
    except TypeError:
        return None


def _warn_kubelet(kubelet: dict[str, Any], family: str | None, walk: Walk) -> None:
    per_core = _int(kubelet.get("podsPerCore"))
    if per_core is not None and family == "Bottlerocket":
        walk.warnings.append(f"kubelet.podsPerCore {per_core} is ignored: Bottlerocket does not support it")
    high = _int(kubelet.get("imageGCHighThresholdPercent"))
    low = _int(kubelet.get("imageGCLowThresholdPercent"))
    if high is not None and low is None and high <= KUBELET_IMAGE_GC_LOW:
        walk.warnings.append(
            f"kubelet.imageGCHighThresholdPercent {high} is not above kubelet's default low threshold "
            f"({KUBELET_IMAGE_GC_LOW}); kubelet will not start"
        )
    if low is not None and high is None and low >= KUBELET_IMAGE_GC_HIGH:
        walk.warnings.append(
            f"kubelet.imageGCLowThresholdPercent {low} is not below kubelet's default high threshold "
            f"({KUBELET_IMAGE_GC_HIGH}); kubelet will not start"
        )
    dns = kubelet.get("clusterDNS")
    if isinstance(dns, list):
        for i, address in enumerate(dns):
            if isinstance(address, str) and not _is_ip(address):
                walk.warnings.append(
                    f"kubelet.clusterDNS[{i}] {_quote(address)} is not an IP address; kubelet ignores it"
                )


def _quote(text: str, limit: int = 40) -> str:
    """A value for a warning: quoted, cut to ``limit`` characters so warnings stay short."""
    return show(text if len(text) <= limit else text[: limit - 3] + "...")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _warn(spec: dict[str, Any], walk: Walk) -> None:
    for term in _alias_terms(spec):
        if term["alias"].split("@")[0] == "al2":
            walk.warnings.append(
                f"alias {_quote(term['alias'])}: AL2 aliases are rejected on EKS >= 1.33; consider al2023"
            )
    options = spec.get("metadataOptions")
    if isinstance(options, dict) and options.get("httpTokens") == "optional":
        walk.warnings.append('metadataOptions.httpTokens "optional" allows IMDSv1; "required" is the secure default')
    tags = spec.get("tags")
    if isinstance(tags, dict):
        for key in tags:
            if isinstance(key, str) and key.lower().startswith("aws:"):
                walk.warnings.append(f"tag {_quote(key)}: the aws: prefix is reserved by AWS; EC2 rejects it at launch")
