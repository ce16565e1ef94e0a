"""Pods as the solver sees them: effective requests, every pod-side constraint, label selectors,
and errors that name the field."""

from __future__ import annotations

import copy
import datetime
import json
import pickle
import random
import subprocess
import sys

import pytest

from provisioning.scheduling.pods import (
    EMPTY_MAP,
    NO_AFFINITY,
    FrozenMap,
    HostPort,
    LabelSelector,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Owner,
    Pod,
    PodAffinityTerm,
    PodError,
    PodToleration,
    PreferredSchedulingTerm,
    TopologySpreadConstraint,
    effective_requests,
)

GI = 2**30
MI = 2**20


def manifest(spec=None, **metadata):
    metadata.setdefault("name", "p")
    if spec is None:
        spec = {"containers": [{"name": "app"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def container(requests=None, limits=None, **extra):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": extra.pop("name", "c"), "image": "nginx", "resources": resources, **extra}


def requests_of(spec) -> dict:
    return dict(Pod.from_manifest(manifest(spec)).requests)


# --------------------------------------------------------------------------------------------
# Effective requests


class TestRequests:
    def test_a_pod_without_requests_still_takes_a_pod_slot(self):
        assert requests_of({"containers": [{"name": "app"}]}) == {"pods": 1}

    def test_containers_are_summed(self):
        spec = {
            "containers": [
                container({"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"}),
                container({"cpu": "1.5", "memory": "1Gi"}, name="d"),
            ]
        }
        assert requests_of(spec) == {"cpu": 1750, "memory": 1536 * MI, "ephemeral-storage": GI, "pods": 1}

    def test_quantity_forms(self):
        spec = {"containers": [container({"cpu": 2, "memory": "1G", "ephemeral-storage": 1.5})]}
        assert requests_of(spec) == {"cpu": 2000, "memory": 10**9, "ephemeral-storage": 2, "pods": 1}

    def test_init_container_larger_than_the_sum_wins(self):
        spec = {
            "containers": [container({"cpu": "100m", "memory": "100Mi"}), container({"cpu": "100m"}, name="d")],
            "initContainers": [container({"cpu": "1", "memory": "50Mi"}, name="init")],
        }
        # cpu: max(200, 1000); memory: max(100Mi, 50Mi)
        assert requests_of(spec) == {"cpu": 1000, "memory": 100 * MI, "pods": 1}

    def test_init_containers_take_the_max_not_the_sum(self):
        spec = {
            "containers": [container({"cpu": "100m"})],
            "initContainers": [container({"cpu": "500m"}, name="a"), container({"cpu": "700m"}, name="b")],
        }
        assert requests_of(spec)["cpu"] == 700

    def test_sidecars_add_to_the_sum_and_to_later_init_containers(self):
        spec = {
            "containers": [container({"cpu": "100m"})],
            "initContainers": [
                container({"cpu": "2"}, name="before"),  # runs alone: 2000
                container({"cpu": "500m"}, name="proxy", restartPolicy="Always"),
                container({"cpu": "1800m"}, name="after"),  # runs beside the proxy: 2300
            ],
        }
        assert requests_of(spec)["cpu"] == 2300

    def test_sidecar_keeps_running_beside_the_app(self):
        spec = {
            "containers": [container({"cpu": "1", "memory": "1Gi"})],
            "initContainers": [
                container({"cpu": "200m", "memory": "128Mi"}, name="proxy", restartPolicy="Always"),
                container({"cpu": "500m"}, name="migrate"),
            ],
        }
        assert requests_of(spec) == {"cpu": 1200, "memory": GI + 128 * MI, "pods": 1}

    def test_two_sidecars_accumulate(self):
        spec = {
            "containers": [container({"cpu": "100m"})],
            "initContainers": [
                container({"cpu": "300m"}, name="a", restartPolicy="Always"),
                container({"cpu": "300m"}, name="b", restartPolicy="Always"),
                container({"cpu": "1"}, name="late"),  # 1000 + 600 beside it
            ],
        }
        assert requests_of(spec)["cpu"] == 1600

    def test_overhead_is_added(self):
        spec = {
            "containers": [container({"cpu": "1", "memory": "1Gi"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        }
        assert requests_of(spec) == {"cpu": 1250, "memory": GI + 120 * MI, "pods": 1}

    def test_overhead_is_added_after_the_init_max(self):
        spec = {
            "containers": [container({"cpu": "100m"})],
            "initContainers": [container({"cpu": "2"}, name="init")],
            "overhead": {"cpu": "100m"},
        }
        assert requests_of(spec)["cpu"] == 2100

    def test_extended_resources(self):
        spec = {
            "containers": [
                container({"cpu": "4", "nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1}),
                container({"example.com/fpga": "2", "hugepages-2Mi": "64Mi"}, name="d"),
            ]
        }
        assert requests_of(spec) == {
            "cpu": 4000,
            "nvidia.com/gpu": 1,
            "example.com/fpga": 2,
            "hugepages-2Mi": 64 * MI,
            "pods": 1,
        }

    def test_limits_are_the_requests_when_only_limits_are_set(self):
        spec = {"containers": [container(limits={"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"})]}
        assert requests_of(spec) == {"cpu": 2000, "memory": 4 * GI, "nvidia.com/gpu": 2, "pods": 1}

    def test_limits_default_each_missing_request_separately(self):
        spec = {"containers": [container({"cpu": "500m"}, {"cpu": "2", "memory": "1Gi"})]}
        assert requests_of(spec) == {"cpu": 500, "memory": GI, "pods": 1}

    def test_init_container_limits_default_too(self):
        spec = {"containers": [container({"cpu": "100m"})], "initContainers": [container(limits={"cpu": "3"})]}
        assert requests_of(spec)["cpu"] == 3000

    def test_pod_level_resources_replace_the_container_aggregate(self):
        spec = {
            "containers": [container({"cpu": "100m", "memory": "64Mi"}), container({"cpu": "100m"}, name="d")],
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}},
            "overhead": {"cpu": "10m"},
        }
        assert requests_of(spec) == {"cpu": 1010, "memory": 2 * GI, "pods": 1}

    def test_zero_requests_are_dropped(self):
        assert requests_of({"containers": [container({"cpu": "0", "memory": 0})]}) == {"pods": 1}

    def test_effective_requests_directly(self):
        got = effective_requests(
            [{"cpu": 100}, {"cpu": 100, "memory": 10}],
            [({"cpu": 1000}, False), ({"cpu": 50, "memory": 5}, True), ({"memory": 100}, False)],
            overhead={"cpu": 1},
        )
        assert got == {"cpu": 1001, "memory": 105, "pods": 1}

    def test_requests_are_frozen_and_shared(self):
        a = Pod.from_manifest(manifest({"containers": [container({"cpu": "1"})]}, name="a"))
        b = Pod.from_manifest(manifest({"containers": [container({"cpu": "1000m"})]}, name="b"))
        assert isinstance(a.requests, FrozenMap)
        assert a.requests is b.requests
        with pytest.raises(TypeError):
            a.requests["cpu"] = 5  # type: ignore[index]


# --------------------------------------------------------------------------------------------
# Constraints

RICH_SPEC = {
    "priority": 1000,
    "nodeName": None,
    "nodeSelector": {"kubernetes.io/arch": "arm64", "team": "a"},
    "containers": [
        container(
            {"cpu": "500m", "memory": "1Gi"},
            ports=[{"containerPort": 8080, "hostPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
        )
    ],
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "plain", "value": "v"},
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "karpenter.sh/capacity-type",
                                "operator": "In",
                                "values": ["spot", "on-demand", "spot"],
                            },
                            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]},
                        ]
                    },
                    {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-family", "operator": "Exists"}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
                        ]
                    },
                },
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "karpenter.k8s.aws/instance-size", "operator": "NotIn", "values": ["nano"]}
                        ]
                    },
                },
            ],
        },
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 30,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["cache"]}]},
                        "namespaces": ["cache", "infra"],
                    },
                }
            ],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "namespaceSelector": {},
                    "matchLabelKeys": ["version"],
                }
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "topology.kubernetes.io/zone",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "namespaceSelector": {"matchLabels": {"env": "prod"}},
                        "mismatchLabelKeys": ["tenant"],
                    },
                }
            ],
        },
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "minDomains": 3,
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
            "matchLabelKeys": ["version", "absent"],
        },
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        },
    ],
}


@pytest.fixture(scope="module")
def rich():
    return Pod.from_manifest(
        manifest(
            RICH_SPEC,
            name="web-1",
            namespace="shop",
            uid="1234",
            labels={"app": "web", "version": "v2", "tenant": "t1"},
            creationTimestamp="2025-01-02T03:04:05Z",
            ownerReferences=[
                {"kind": "ReplicaSet", "name": "web-abc", "controller": False},
                {"kind": "Deployment", "name": "web", "controller": True},
            ],
        )
    )


class TestConstraints:
    def test_identity(self, rich):
        assert (rich.namespace, rich.name, rich.uid, rich.key) == ("shop", "web-1", "1234", "shop/web-1")
        assert rich.labels == {"app": "web", "version": "v2", "tenant": "t1"}
        assert rich.owner == Owner("Deployment", "web")
        assert rich.priority == 1000
        assert rich.creation_timestamp == "2025-01-02T03:04:05Z"
        assert not rich.is_daemonset and rich.node_name is None and not rich.scheduling_gated and rich.pending

    def test_node_selector(self, rich):
        assert rich.node_selector == {"kubernetes.io/arch": "arm64", "team": "a"}
        assert isinstance(rich.node_selector, FrozenMap)

    def test_required_node_affinity_is_an_or_of_terms(self, rich):
        first, second, third = rich.required_node_affinity
        assert first.match_expressions == (
            NodeSelectorRequirement("karpenter.sh/capacity-type", "In", ("on-demand", "spot")),
            NodeSelectorRequirement("karpenter.k8s.aws/instance-cpu", "Gt", ("3",)),
        )
        assert second == NodeSelectorTerm((NodeSelectorRequirement("karpenter.k8s.aws/instance-family", "Exists", ()),))
        assert third.match_expressions == () and third.match_fields == (
            NodeSelectorRequirement("metadata.name", "In", ("node-1",)),
        )
        key, operator, values = first.match_expressions[0]  # plain (key, operator, values) tuples
        assert (key, operator, values) == ("karpenter.sh/capacity-type", "In", ("on-demand", "spot"))

    def test_terms_convert_back_to_kubernetes(self, rich):
        assert rich.required_node_affinity[1].to_manifest() == {
            "matchExpressions": [{"key": "karpenter.k8s.aws/instance-family", "operator": "Exists"}]
        }

    def test_preferred_node_affinity(self, rich):
        assert rich.preferred_node_affinity == (
            PreferredSchedulingTerm(
                50, NodeSelectorTerm((NodeSelectorRequirement("topology.kubernetes.io/zone", "In", ("us-east-1a",)),))
            ),
            PreferredSchedulingTerm(
                10,
                NodeSelectorTerm((NodeSelectorRequirement("karpenter.k8s.aws/instance-size", "NotIn", ("nano",)),)),
            ),
        )

    def test_tolerations_are_normalized(self, rich):
        assert rich.tolerations == (
            PodToleration("dedicated", "Equal", "gpu", "NoSchedule"),
            PodToleration("spot", "Exists", "", ""),
            PodToleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", 300),
            PodToleration("plain", "Equal", "v", ""),
        )
        assert rich.tolerations[1].to_manifest() == {"key": "spot", "operator": "Exists"}

    def test_topology_spread_with_every_field(self, rich):
        zone, host = rich.topology_spread
        assert zone.max_skew == 1 and zone.topology_key == "topology.kubernetes.io/zone"
        assert zone.when_unsatisfiable == "DoNotSchedule" and zone.hard
        assert zone.min_domains == 3
        assert (zone.node_affinity_policy, zone.node_taints_policy) == ("Ignore", "Honor")
        assert zone.match_label_keys == ("version", "absent")
        # version resolved from the pod's own labels; absent ignored
        assert zone.label_selector == LabelSelector(
            (("app", "web"),), (LabelSelectorRequirement("version", "In", frozenset({"v2"})),)
        )
        assert zone.label_selector.matches({"app": "web", "version": "v2"})
        assert not zone.label_selector.matches({"app": "web", "version": "v1"})
        assert host == TopologySpreadConstraint(
            2, "kubernetes.io/hostname", "ScheduleAnyway", LabelSelector((("app", "web"),))
        )
        assert (host.node_affinity_policy, host.node_taints_policy, host.min_domains) == ("Honor", "Ignore", None)
        assert not host.hard

    def test_pod_affinity(self, rich):
        (required,) = rich.pod_affinity.required
        assert required == PodAffinityTerm(
            "topology.kubernetes.io/zone", LabelSelector((("app", "db"),)), frozenset({"shop"})
        )
        (preferred,) = rich.pod_affinity.preferred
        assert preferred.weight == 30
        assert preferred.term.topology_key == "kubernetes.io/hostname"
        assert preferred.term.namespaces == frozenset({"cache", "infra"})
        assert preferred.term.selects("cache", {"app": "cache"})
        assert not preferred.term.selects("shop", {"app": "cache"})

    def test_pod_anti_affinity(self, rich):
        (required,) = rich.pod_anti_affinity.required
        assert required.all_namespaces and required.namespaces == frozenset()
        assert required.selects("anywhere", {"app": "web", "version": "v2"})
        assert not required.selects("anywhere", {"app": "web", "version": "v1"})  # matchLabelKeys
        (preferred,) = rich.pod_anti_affinity.preferred
        assert preferred.weight == 100
        term = preferred.term
        assert not term.all_namespaces
        assert term.selects_namespace("x", {"env": "prod"})
        assert not term.selects_namespace("x")
        assert term.selects("x", {"app": "web", "tenant": "t2"}, {"env": "prod"})
        assert not term.selects("x", {"app": "web", "tenant": "t1"}, {"env": "prod"})  # mismatchLabelKeys

    def test_host_ports(self, rich):
        assert rich.host_ports == (HostPort("", "TCP", 80),)

    def test_host_network_exposes_container_ports(self):
        spec = {
            "hostNetwork": True,
            "containers": [container(ports=[{"containerPort": 9100}])],
            "initContainers": [
                container(name="side", restartPolicy="Always", ports=[{"containerPort": 53, "protocol": "UDP"}])
            ],
        }
        pod = Pod.from_manifest(manifest(spec))
        assert pod.host_ports == (HostPort("", "TCP", 9100), HostPort("", "UDP", 53))

    def test_namespaceselector_namespace_name_label(self):
        spec = {
            "containers": [container()],
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {},
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "infra"}},
                            "namespaces": ["extra"],
                        }
                    ]
                }
            },
        }
        (term,) = Pod.from_manifest(manifest(spec)).pod_affinity.required
        assert term.selects("infra", {"any": "thing"})
        assert term.selects("extra", {})
        assert not term.selects("default", {})

    def test_a_plain_pod_has_empty_constraints(self):
        pod = Pod.from_manifest(manifest())
        assert pod.namespace == "default"
        assert pod.node_selector is EMPTY_MAP and pod.labels is EMPTY_MAP
        assert pod.required_node_affinity == () and pod.preferred_node_affinity == ()
        assert pod.tolerations == () and pod.topology_spread == () and pod.host_ports == ()
        assert pod.pod_affinity is NO_AFFINITY and pod.pod_anti_affinity is NO_AFFINITY
        assert not pod.pod_affinity
        assert pod.owner is None and pod.priority == 0 and pod.uid is None

    def test_bound_and_gated_pods_are_not_pending(self):
        bound = Pod.from_manifest(manifest({"nodeName": "ip-10-0-0-1", "containers": [container()]}))
        assert bound.node_name == "ip-10-0-0-1" and not bound.pending
        gated = Pod.from_manifest(manifest({"schedulingGates": [{"name": "wait"}], "containers": [container()]}))
        assert gated.scheduling_gated and not gated.pending

    def test_daemonset_owned_pod(self):
        pod = Pod.from_manifest(
            manifest(ownerReferences=[{"kind": "DaemonSet", "name": "fluentd", "controller": True, "uid": "x"}])
        )
        assert pod.is_daemonset and pod.owner == ("DaemonSet", "fluentd")

    def test_yaml_datetimes_are_written_back(self):
        created = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
        pod = Pod.from_manifest(manifest(creationTimestamp=created))
        assert pod.creation_timestamp == "2025-01-02T03:04:05Z"

    def test_null_sections_read_as_empty(self):
        spec = {
            "containers": [{"name": "c", "resources": None}],
            "tolerations": None,
            "affinity": {"nodeAffinity": None, "podAffinity": None},
            "nodeSelector": None,
        }
        pod = Pod.from_manifest(manifest(spec, labels=None))
        assert pod.requests == {"pods": 1} and pod.tolerations == ()

    def test_identical_constraints_are_shared_between_pods(self, rich):
        other = Pod.from_manifest(
            manifest(copy.deepcopy(RICH_SPEC), name="web-2", namespace="shop", labels=dict(rich.labels))
        )
        for name in (
            "labels",
            "requests",
            "node_selector",
            "required_node_affinity",
            "preferred_node_affinity",
            "tolerations",
            "topology_spread",
            "pod_affinity",
            "pod_anti_affinity",
            "host_ports",
        ):
            assert getattr(other, name) is getattr(rich, name), name
        assert other.shape_key == rich.shape_key


# --------------------------------------------------------------------------------------------
# The Pod type


class TestPodType:
    def test_direct_construction_normalizes(self):
        pod = Pod("default", "x", {"cpu": 100}, labels={"app": "a"}, tolerations=[PodToleration("k", "Exists")])
        assert pod.requests == {"cpu": 100, "pods": 1}
        assert isinstance(pod.labels, FrozenMap) and isinstance(pod.requests, FrozenMap)
        assert isinstance(pod.tolerations, tuple)
        assert hash(pod) == hash(
            Pod(
                "default",
                "x",
                {"cpu": 100, "pods": 1},
                labels={"app": "a"},
                tolerations=(PodToleration("k", "Exists"),),
            )
        )

    def test_default_requests(self):
        assert Pod("ns", "n").requests == {"pods": 1}

    def test_shape_key_ignores_identity_only(self):
        base = Pod.from_manifest(manifest(RICH_SPEC, name="a", labels={"app": "web"}, uid="1"))
        same = Pod.from_manifest(
            manifest(RICH_SPEC, name="b", labels={"app": "web"}, uid="2", creationTimestamp="2024-01-01T00:00:00Z")
        )
        assert base.shape_key == same.shape_key and hash(base.shape_key) == hash(same.shape_key)
        assert base != same
        for changed in (
            manifest(RICH_SPEC, name="a", labels={"app": "other"}),
            manifest(RICH_SPEC, name="a", labels={"app": "web"}, namespace="other"),
            manifest({**RICH_SPEC, "priority": 1}, name="a", labels={"app": "web"}),
            manifest({**RICH_SPEC, "tolerations": []}, name="a", labels={"app": "web"}),
            manifest({**RICH_SPEC, "containers": [container({"cpu": "1"})]}, name="a", labels={"app": "web"}),
        ):
            assert Pod.from_manifest(changed).shape_key != base.shape_key

    def test_renamed_shares_everything_but_the_name(self, rich):
        copy_ = rich.renamed("web-9")
        assert copy_.name == "web-9" and copy_.uid is None and copy_.key == "shop/web-9"
        assert copy_.shape_key is rich.shape_key
        assert copy_.tolerations is rich.tolerations and copy_.requests is rich.requests
        assert rich.name == "web-1"

    def test_pickle_and_copy(self, rich):
        for clone in (pickle.loads(pickle.dumps(rich)), copy.deepcopy(rich), copy.copy(rich)):
            assert clone == rich and hash(clone) == hash(rich) and clone.shape_key == rich.shape_key

    def test_frozen(self, rich):
        with pytest.raises(AttributeError):
            rich.name = "x"  # type: ignore[misc]
        with pytest.raises(TypeError):
            rich.labels["app"] = "x"  # type: ignore[index]
        with pytest.raises(TypeError):
            rich.labels.update(app="x")  # type: ignore[attr-defined]

    def test_frozen_map(self):
        a, b = FrozenMap({"a": "1", "b": "2"}), FrozenMap({"b": "2", "a": "1"})
        assert a == b == {"a": "1", "b": "2"} and hash(a) == hash(b)
        assert {a: 1}[b] == 1
        assert pickle.loads(pickle.dumps(a)) == a
        assert a | {"c": "3"} == {"a": "1", "b": "2", "c": "3"}


# --------------------------------------------------------------------------------------------
# Label selectors


class TestLabelSelector:
    LABELS = {"app": "web", "tier": "front", "env": "prod"}

    @pytest.mark.parametrize(
        ("selector", "expected"),
        [
            ({}, True),
            ({"matchLabels": {"app": "web"}}, True),
            ({"matchLabels": {"app": "web", "tier": "back"}}, False),
            ({"matchLabels": {"missing": ""}}, False),
            ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}, True),
            ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]}, False),
            ({"matchExpressions": [{"key": "nope", "operator": "In", "values": ["x"]}]}, False),
            ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["back"]}]}, True),
            ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}, False),
            ({"matchExpressions": [{"key": "nope", "operator": "NotIn", "values": ["x"]}]}, True),  # absent key
            ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, True),
            ({"matchExpressions": [{"key": "nope", "operator": "Exists"}]}, False),
            ({"matchExpressions": [{"key": "nope", "operator": "DoesNotExist"}]}, True),
            ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, False),
            (
                {
                    "matchLabels": {"app": "web"},
                    "matchExpressions": [
                        {"key": "env", "operator": "In", "values": ["prod"]},
                        {"key": "legacy", "operator": "DoesNotExist"},
                    ],
                },
                True,
            ),
        ],
    )
    def test_matches(self, selector, expected):
        assert LabelSelector.from_manifest(selector).matches(self.LABELS) is expected

    def test_empty_selects_everything_and_null_nothing(self):
        everything, nothing = LabelSelector.from_manifest({}), LabelSelector.from_manifest(None)
        assert everything.is_empty and everything.matches({}) and everything.matches(self.LABELS)
        assert nothing.null and not nothing.matches({}) and not nothing.matches(self.LABELS)
        assert everything is LabelSelector.EVERYTHING and nothing is LabelSelector.NOTHING
        assert str(everything) == "<everything>" and str(nothing) == "<nothing>"
        assert nothing.to_manifest() is None and everything.to_manifest() == {}

    def test_text_and_round_trip(self):
        raw = {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "env", "operator": "Exists"},
                {"key": "zone", "operator": "NotIn", "values": ["x"]},
            ],
        }
        selector = LabelSelector.from_manifest(raw)
        assert str(selector) == "app=web,env,!legacy,tier in (a,b),zone notin (x)"
        assert LabelSelector.from_manifest(selector.to_manifest()) is selector

    def test_equal_selectors_are_one_object(self):
        a = LabelSelector.from_manifest({"matchLabels": {"a": "1", "b": "2"}})
        b = LabelSelector.from_manifest({"matchLabels": {"b": "2", "a": "1"}})
        assert a is b


# --------------------------------------------------------------------------------------------
# Bad input


def _spread(**overrides):
    base = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    base["labelSelector"] = {"matchLabels": {"app": "a"}}
    base.update(overrides)
    return {"containers": [container()], "topologySpreadConstraints": [base]}


def _node_term(expression):
    return {
        "containers": [container()],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expression]}]
                }
            }
        },
    }


REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"

BAD = [
    # (spec, path, words the message must contain)
    ({"containers": [container({"cpu": "lots"})]}, "spec.containers[0].resources.requests.cpu", "500m"),
    ({"containers": [container({"cpu": "-1"})]}, "spec.containers[0].resources.requests.cpu", "negative"),
    ({"containers": [container({"memory": -5})]}, "spec.containers[0].resources.requests.memory", "negative"),
    ({"containers": [container({"cpu": True})]}, "spec.containers[0].resources.requests.cpu", "quantity"),
    ({"containers": [container({"cpu": None})]}, "spec.containers[0].resources.requests.cpu", "quantity"),
    ({"containers": [container({"cpu": [1]})]}, "spec.containers[0].resources.requests.cpu", "quantity"),
    ({"containers": [container({"cpu": float("nan")})]}, "spec.containers[0].resources.requests.cpu", "quantity"),
    ({"containers": [container({"memory": "1e999999999"})]}, "spec.containers[0].resources.requests.memory", "range"),
    ({"containers": [container({"memory": "1e30"})]}, "spec.containers[0].resources.requests.memory", "range"),
    (
        {"containers": [container({"nvidia.com/gpu": "0.5"})]},
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "whole",
    ),
    ({"containers": [container(limits={"cpu": "x"})]}, "spec.containers[0].resources.limits.cpu", "quantity"),
    ({"containers": [container({"cpu": "2"}, {"cpu": "1"})]}, "spec.containers[0].resources.requests.cpu", "limit"),
    (
        {"containers": [{"name": "c", "resources": {"requests": ["cpu"]}}]},
        "spec.containers[0].resources.requests",
        "object",
    ),
    ({"containers": [{"name": "c", "resources": "big"}]}, "spec.containers[0].resources", "object"),
    ({"containers": [container(), container({"cpu": "1"}, name="d"), "oops"]}, "spec.containers[2]", "object"),
    ({"containers": {"name": "c"}}, "spec.containers", "list"),
    ({"containers": []}, "spec.containers", "at least one"),
    (
        {"initContainers": [container({"cpu": "bad"})], "containers": [container()]},
        "spec.initContainers[0].resources.requests.cpu",
        "quantity",
    ),
    ({"overhead": {"cpu": "x"}, "containers": [container()]}, "spec.overhead.cpu", "quantity"),
    (
        {"resources": {"requests": {"nvidia.com/gpu": 1}}, "containers": [container()]},
        "spec.resources.requests[nvidia.com/gpu]",
        "cpu, memory",
    ),
    ({"nodeSelector": {"zone": 1}, "containers": [container()]}, "spec.nodeSelector.zone", 'quote it: "1"'),
    ({"nodeSelector": ["a"], "containers": [container()]}, "spec.nodeSelector", "object"),
    ({"priority": "high", "containers": [container()]}, "spec.priority", "integer"),
    ({"nodeName": 5, "containers": [container()]}, "spec.nodeName", "string"),
    ({"hostNetwork": "yes", "containers": [container()]}, "spec.hostNetwork", "true or false"),
    ({"containers": [container(ports=[{"hostPort": 70000}])]}, "spec.containers[0].ports[0].hostPort", "65535"),
    (
        {"containers": [container(ports=[{"hostPort": 80, "protocol": "HTTP"}])]},
        "spec.containers[0].ports[0].protocol",
        "TCP",
    ),
    # tolerations
    (
        {"tolerations": [{"key": "a", "operator": "Maybe"}], "containers": [container()]},
        "spec.tolerations[0].operator",
        "Equal, Exists",
    ),
    (
        {"tolerations": [{"key": "a", "operator": "Exists", "value": "v"}], "containers": [container()]},
        "spec.tolerations[0].value",
        "empty",
    ),
    ({"tolerations": [{"value": "v"}], "containers": [container()]}, "spec.tolerations[0].operator", "Exists"),
    (
        {"tolerations": [{"key": "a", "effect": "Sometimes"}], "containers": [container()]},
        "spec.tolerations[0].effect",
        "NoSchedule",
    ),
    (
        {"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}], "containers": [container()]},
        "spec.tolerations[0].tolerationSeconds",
        "NoExecute",
    ),
    ({"tolerations": "all", "containers": [container()]}, "spec.tolerations", "list"),
    # node affinity
    (
        _node_term({"key": "a", "operator": "Like", "values": ["x"]}),
        f"{REQUIRED}.matchExpressions[0].operator",
        "In, NotIn",
    ),
    (_node_term({"key": "a", "operator": "In"}), f"{REQUIRED}.matchExpressions[0].values", "at least one"),
    (
        _node_term({"key": "a", "operator": "Exists", "values": ["x"]}),
        f"{REQUIRED}.matchExpressions[0].values",
        "empty",
    ),
    (
        _node_term({"key": "a", "operator": "Gt", "values": ["big"]}),
        f"{REQUIRED}.matchExpressions[0].values",
        "integer",
    ),
    (_node_term({"key": "a", "operator": "In", "values": [2]}), f"{REQUIRED}.matchExpressions[0].values[0]", "string"),
    (_node_term({"operator": "Exists"}), f"{REQUIRED}.matchExpressions[0].key", "required"),
    (
        {
            "containers": [container()],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        },
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        "at least one",
    ),
    (
        {
            "containers": [container()],
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "preference": {}}]}
            },
        },
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "at most 100",
    ),
    (
        {
            "containers": [container()],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}},
        },
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference",
        "required",
    ),
    # topology spread
    (_spread(maxSkew=0), "spec.topologySpreadConstraints[0].maxSkew", "at least 1"),
    (_spread(maxSkew=None), "spec.topologySpreadConstraints[0].maxSkew", "required"),
    (_spread(maxSkew="1"), "spec.topologySpreadConstraints[0].maxSkew", "integer"),
    (_spread(topologyKey=""), "spec.topologySpreadConstraints[0].topologyKey", "empty"),
    (
        _spread(whenUnsatisfiable="Sometimes"),
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        "DoNotSchedule, ScheduleAnyway",
    ),
    (_spread(minDomains=0), "spec.topologySpreadConstraints[0].minDomains", "at least 1"),
    (
        _spread(minDomains=2, whenUnsatisfiable="ScheduleAnyway"),
        "spec.topologySpreadConstraints[0].minDomains",
        "DoNotSchedule",
    ),
    (_spread(nodeAffinityPolicy="Always"), "spec.topologySpreadConstraints[0].nodeAffinityPolicy", "Honor, Ignore"),
    (_spread(nodeTaintsPolicy="x"), "spec.topologySpreadConstraints[0].nodeTaintsPolicy", "Honor, Ignore"),
    (_spread(labelSelector=None, matchLabelKeys=["app"]), "spec.topologySpreadConstraints[0]", "labelSelector"),
    (_spread(matchLabelKeys=["app"]), "spec.topologySpreadConstraints[0].matchLabelKeys[0]", "already"),
    (
        _spread(labelSelector={"matchExpressions": [{"key": "a", "operator": "Maybe"}]}),
        "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator",
        "In, NotIn, Exists, DoesNotExist",
    ),
    (
        _spread(labelSelector={"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
        "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values",
        "at least one",
    ),
    (
        _spread(labelSelector={"matchLabels": {"a": ["x"]}}),
        "spec.topologySpreadConstraints[0].labelSelector.matchLabels.a",
        "string",
    ),
    (
        {"containers": [container()], "topologySpreadConstraints": [_spread()["topologySpreadConstraints"][0]] * 2},
        "spec.topologySpreadConstraints[1].topologyKey",
        "duplicates",
    ),
    # pod affinity
    (
        {
            "containers": [container()],
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}},
        },
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        "required",
    ),
    (
        {
            "containers": [container()],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "podAffinityTerm": {}}]
                }
            },
        },
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "at least 1",
    ),
    (
        {
            "containers": [container()],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5}]}},
        },
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm",
        "required",
    ),
    (
        {
            "containers": [container()],
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "k", "namespaces": "ns"}]
                }
            },
        },
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces",
        "list",
    ),
    ({"containers": [container()], "affinity": []}, "spec.affinity", "object"),
]


@pytest.mark.parametrize(("spec", "path", "words"), BAD, ids=[f"{i}:{case[1]}" for i, case in enumerate(BAD)])
def test_bad_input_names_the_field(spec, path, words):
    with pytest.raises(PodError) as caught:
        Pod.from_manifest(manifest(spec, labels={"app": "a"}))
    assert caught.value.path == path
    assert words in caught.value.message
    assert str(caught.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (None, ""),
        ([], ""),
        ({"kind": "Deployment", "metadata": {"name": "x"}, "spec": {}}, "kind"),
        ({"kind": "Pod", "spec": {"containers": [{}]}}, "metadata.name"),
        ({"kind": "Pod", "metadata": {"name": ""}, "spec": {"containers": [{}]}}, "metadata.name"),
        ({"kind": "Pod", "metadata": {"name": "x"}}, "spec"),
        (
            {"kind": "Pod", "metadata": {"name": "x", "labels": {"a": True}}, "spec": {"containers": [{}]}},
            "metadata.labels.a",
        ),
        (
            {"kind": "Pod", "metadata": {"name": "x", "namespace": 3}, "spec": {"containers": [{}]}},
            "metadata.namespace",
        ),
        (
            {"kind": "Pod", "metadata": {"name": "x", "ownerReferences": {}}, "spec": {"containers": [{}]}},
            "metadata.ownerReferences",
        ),
        ({"kind": "Pod", "metadata": "x", "spec": {"containers": [{}]}}, "metadata"),
    ],
)
def test_bad_documents(document, path):
    with pytest.raises(PodError) as caught:
        Pod.from_manifest(document)
    assert caught.value.path == path


def test_errors_pickle_and_carry_a_document():
    error = PodError("spec.replicas", "must be at least 0", "Deployment web")
    assert str(error) == "Deployment web: spec.replicas: must be at least 0"
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.path, clone.message, clone.document) == (error.path, error.message, error.document)
    assert isinstance(error, ValueError)


GARBAGE = [None, 0, -1, 1.5, float("inf"), True, "", "x", "-3", [], [1], {}, {"a": 1}, [{"key": 1}], "9" * 80]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


def _set(document, path, value):
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


def test_garbage_anywhere_raises_only_pod_errors():
    """Replace each field of a rich manifest with garbage: the parser either accepts it or
    raises PodError; nothing else escapes."""
    rng = random.Random(4)
    base = manifest(RICH_SPEC, name="web", labels={"app": "web", "version": "v1"})
    paths = [p for p in _paths(base) if p]
    errors = 0
    for path in paths:
        for value in rng.sample(GARBAGE, 5):
            document = copy.deepcopy(base)
            _set(document, path, value)
            try:
                Pod.from_manifest(document)
            except PodError as exc:
                errors += 1
                assert exc.message
    assert errors > len(paths)  # most garbage is rejected


def test_hashes_survive_pickling_into_another_process():
    """Cached hashes (shape keys, frozen maps) are recomputed on load: string hashes differ per process."""
    pod = Pod.from_manifest(manifest(RICH_SPEC, name="a", labels={"app": "web"}))
    code = (
        "import pickle, sys\n"
        "from provisioning.scheduling.pods import Pod\n"
        "pod, raw = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = Pod.from_manifest(raw)\n"
        "print({pod.shape_key: 1}.get(fresh.shape_key), {pod.labels: 1}.get(fresh.labels), pod == fresh)\n"
    )
    payload = pickle.dumps((pod, manifest(RICH_SPEC, name="a", labels={"app": "web"})))
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=True)
    assert out.stdout.decode().split() == ["1", "1", "True"]


def test_a_manifest_read_again_gives_the_same_pod_and_a_changed_one_a_new_pod():
    """Reading the cluster again reads an unchanged manifest once; any change reads anew."""
    from provisioning.scheduling.podspec import pod_from_manifest

    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]},
    }
    first = pod_from_manifest(manifest)
    assert pod_from_manifest(json.loads(json.dumps(manifest))) is first
    changed = json.loads(json.dumps(manifest))
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    assert pod_from_manifest(changed).requests["cpu"] == 500
    assert pod_from_manifest(manifest).requests["cpu"] == 250
