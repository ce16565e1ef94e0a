"""Documents as scheduling input: workload expansion, DaemonSet overhead, existing nodes, and
``expand_all`` over a multi-document stream."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from dataclasses import replace

import pytest
import yaml

from provisioning.scheduling.pods import NodeSelectorRequirement, Owner, Pod, PodError, PodToleration
from provisioning.scheduling.taints import Taint
from provisioning.scheduling.workloads import (
    MAX_REPLICAS,
    DaemonSetOverhead,
    ExistingNode,
    Skipped,
    Workloads,
    describe,
    expand,
    expand_all,
)

GI = 2**30


def template(cpu="250m", memory="256Mi", labels=None, **spec):
    return {
        "metadata": {"labels": labels if labels is not None else {"app": "web"}},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            **spec,
        },
    }


def workload(kind, name="web", namespace=None, api_version="apps/v1", **spec):
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    spec.setdefault("template", template())
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def node(name="ip-10-0-1-1", **overrides):
    document = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/instance-type": "m5.large",
            },
        },
        "spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "2", "memory": "8010568Ki", "pods": "29", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "1930m", "memory": "7068744Ki", "pods": "29", "ephemeral-storage": "18Gi"},
        },
    }
    document.update(overrides)
    return document


# --------------------------------------------------------------------------------------------
# Expansion of each kind


class TestExpand:
    @pytest.mark.parametrize("kind", ["Deployment", "ReplicaSet", "StatefulSet"])
    def test_replicas_are_named_and_placed_in_the_namespace(self, kind):
        pods = expand(workload(kind, namespace="shop", replicas=3))
        assert [p.key for p in pods] == ["shop/web-0", "shop/web-1", "shop/web-2"]
        assert all(isinstance(p, Pod) for p in pods)
        assert {p.owner for p in pods} == {Owner(kind, "web")}
        assert all(p.requests == {"cpu": 250, "memory": 256 * 2**20, "pods": 1} for p in pods)
        assert all(p.labels["app"] == "web" for p in pods)

    @pytest.mark.parametrize("kind", ["Deployment", "ReplicaSet", "StatefulSet"])
    def test_replicas_default_to_one_and_namespace_to_default(self, kind):
        pods = expand(workload(kind))
        assert [p.key for p in pods] == ["default/web-0"]

    def test_zero_replicas(self):
        assert expand(workload("Deployment", replicas=0)) == []

    def test_job_uses_parallelism_and_ignores_completions(self):
        pods = expand(workload("Job", name="batch", api_version="batch/v1", parallelism=4, completions=100))
        assert [p.name for p in pods] == ["batch-0", "batch-1", "batch-2", "batch-3"]
        assert pods[0].owner == ("Job", "batch")

    def test_job_parallelism_defaults_to_one(self):
        assert [p.name for p in expand(workload("Job", name="once", completions=5))] == ["once-0"]

    def test_suspended_job_runs_nothing(self):
        assert expand(workload("Job", parallelism=3, suspend=True)) == []

    def test_pod(self):
        document = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "tools", "labels": {"app": "solo"}},
            "spec": template()["spec"],
        }
        (pod,) = expand(document)
        assert pod.key == "tools/solo" and pod.labels == {"app": "solo"} and pod.owner is None

    def test_template_labels_become_pod_labels(self):
        pods = expand(workload("StatefulSet", replicas=2, template=template(labels={"app": "db", "tier": "data"})))
        assert all(p.labels == {"app": "db", "tier": "data"} for p in pods)

    def test_deployment_pods_carry_a_pod_template_hash(self):
        (a,) = expand(workload("Deployment"))
        (b,) = expand(workload("Deployment", template=template(cpu="1")))
        assert set(a.labels) == {"app", "pod-template-hash"}
        assert a.labels["pod-template-hash"] != b.labels["pod-template-hash"]
        (again,) = expand(workload("Deployment"))
        assert again.labels == a.labels
        (rs,) = expand(workload("ReplicaSet"))
        assert "pod-template-hash" not in rs.labels

    def test_match_label_keys_on_pod_template_hash(self):
        spread = {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["pod-template-hash"],
        }
        (pod,) = expand(workload("Deployment", template=template(topologySpreadConstraints=[spread])))
        selector = pod.topology_spread[0].label_selector
        assert selector.matches(pod.labels)
        assert not selector.matches({"app": "web", "pod-template-hash": "other"})

    def test_template_constraints_are_parsed(self):
        spec = {
            "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "priority": 7,
        }
        pods = expand(workload("Deployment", replicas=2, template=template(**spec)))
        assert all(p.node_selector == {"karpenter.sh/capacity-type": "spot"} for p in pods)
        assert all(p.tolerations == (PodToleration("spot", "Exists"),) for p in pods)
        assert all(p.priority == 7 for p in pods)

    def test_replicas_share_one_shape(self):
        pods = expand(workload("Deployment", replicas=5))
        assert len({p.shape_key for p in pods}) == 1
        assert len({p.key for p in pods}) == 5
        again = expand(workload("Deployment", name="web", replicas=1))
        assert again[0].shape_key == pods[0].shape_key
        other = expand(workload("Deployment", name="api", replicas=1, template=template(labels={"app": "api"})))
        assert other[0].shape_key != pods[0].shape_key

    def test_describe(self):
        assert describe(workload("Deployment")) == "Deployment web"
        assert describe(workload("Deployment", namespace="shop")) == "Deployment shop/web"
        assert describe(workload("Deployment", namespace="default")) == "Deployment web"
        assert describe({"kind": "Job"}) == "Job"
        assert describe(None) == "document"


class TestDaemonSet:
    def test_overhead_with_its_placement_constraints(self):
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
                    ]
                }
            }
        }
        document = workload(
            "DaemonSet",
            name="fluentd",
            namespace="logging",
            selector={"matchLabels": {"app": "fluentd"}},
            template=template(
                cpu="100m",
                memory="200Mi",
                labels={"app": "fluentd"},
                nodeSelector={"kubernetes.io/arch": "amd64"},
                affinity=affinity,
                tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            ),
        )
        (daemonset,) = expand(document)
        assert isinstance(daemonset, DaemonSetOverhead)
        assert (daemonset.namespace, daemonset.name, daemonset.key) == ("logging", "fluentd", "logging/fluentd")
        assert daemonset.pod.is_daemonset and daemonset.pod.owner == ("DaemonSet", "fluentd")
        assert daemonset.requests == {"cpu": 100, "memory": 200 * 2**20, "pods": 1}
        assert daemonset.node_selector == {"kubernetes.io/arch": "amd64"}
        (term,) = daemonset.required_node_affinity
        assert term.match_expressions == (NodeSelectorRequirement("kubernetes.io/os", "In", ("linux",)),)
        keys = {(t.key, t.effect) for t in daemonset.tolerations}
        assert ("dedicated", "NoSchedule") in keys
        # the DaemonSet controller's own tolerations
        assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
        assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in keys

    def test_host_network_daemonsets_tolerate_network_unavailable(self):
        (daemonset,) = expand(workload("DaemonSet", template=template(hostNetwork=True)))
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in {
            (t.key, t.effect) for t in daemonset.tolerations
        }

    def test_tolerate_everything_is_kept_as_is(self):
        (daemonset,) = expand(workload("DaemonSet", template=template(tolerations=[{"operator": "Exists"}])))
        assert daemonset.tolerations[0] == PodToleration("", "Exists")


class TestNode:
    def test_node(self):
        (existing,) = expand(node())
        assert isinstance(existing, ExistingNode)
        assert existing.name == "ip-10-0-1-1" and existing.hostname == "ip-10-0-1-1"
        assert existing.labels["topology.kubernetes.io/zone"] == "us-east-1a"
        assert existing.taints == (Taint("dedicated", "infra", "NoSchedule"),)
        assert existing.allocatable == {"cpu": 1930, "memory": 7068744 * 1024, "pods": 29, "ephemeral-storage": 18 * GI}
        assert existing.capacity["cpu"] == 2000
        assert not existing.unschedulable and existing.pods == ()

    def test_capacity_stands_in_for_allocatable(self):
        (existing,) = expand(node(status={"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}}))
        assert existing.allocatable == {"cpu": 4000, "memory": 16 * GI, "pods": 110}

    def test_minimal_node(self):
        (existing,) = expand({"kind": "Node", "metadata": {"name": "n1"}})
        assert existing.labels == {} and existing.taints == () and existing.allocatable == {}
        assert existing.hostname == "n1"

    def test_cordoned(self):
        (existing,) = expand(node(spec={"unschedulable": True}))
        assert existing.unschedulable and existing.taints == ()

    def test_remaining(self):
        pod = Pod("default", "a", {"cpu": 500, "memory": GI}, node_name="ip-10-0-1-1")
        (existing,) = expand(node())
        existing = replace(existing, pods=(pod,))
        assert existing.requested() == {"cpu": 500, "memory": GI, "pods": 1}
        assert existing.remaining()["cpu"] == 1430 and existing.remaining()["pods"] == 28

    @pytest.mark.parametrize(
        ("overrides", "path"),
        [
            ({"metadata": {}}, "metadata.name"),
            ({"spec": {"taints": [{"key": "a", "effect": "Never"}]}}, "spec.taints[0].effect"),
            ({"spec": {"taints": [{"effect": "NoSchedule"}]}}, "spec.taints[0].key"),
            ({"spec": {"taints": {"key": "a"}}}, "spec.taints"),
            ({"spec": {"unschedulable": "yes"}}, "spec.unschedulable"),
            ({"status": {"allocatable": {"cpu": "four"}}}, "status.allocatable.cpu"),
            ({"status": {"capacity": {"memory": "-1Gi"}}}, "status.capacity.memory"),
        ],
    )
    def test_bad_nodes(self, overrides, path):
        with pytest.raises(PodError) as caught:
            expand(node(**overrides))
        assert caught.value.path == path
        assert caught.value.document.startswith("Node")


# --------------------------------------------------------------------------------------------
# Bad workloads


class TestBadWorkloads:
    def test_container_error_names_document_and_path(self):
        document = workload("Deployment", template=template(cpu="a lot"))
        with pytest.raises(PodError) as caught:
            expand(document)
        error = caught.value
        assert error.document == "Deployment web"
        assert error.path == "spec.template.spec.containers[0].resources.requests.cpu"
        assert str(error).startswith("Deployment web: spec.template.spec.containers[0].resources.requests.cpu: ")
        assert "500m" in error.message

    @pytest.mark.parametrize(
        ("document", "path", "words"),
        [
            (workload("Deployment", replicas=-1), "spec.replicas", "at least 0"),
            (workload("Deployment", replicas="3"), "spec.replicas", "integer"),
            (workload("StatefulSet", replicas=MAX_REPLICAS + 1), "spec.replicas", f"at most {MAX_REPLICAS}"),
            (workload("Job", parallelism=True), "spec.parallelism", "integer"),
            (workload("Job", suspend="no"), "spec.suspend", "true or false"),
            (workload("Deployment", template=None), "spec.template", "required"),
            (workload("Deployment", template={"metadata": {}}), "spec.template.spec", "required"),
            (
                workload("Deployment", template={"spec": {"containers": []}}),
                "spec.template.spec.containers",
                "at least one",
            ),
            (
                workload("ReplicaSet", template=template(labels={"app": 3})),
                "spec.template.metadata.labels.app",
                "string",
            ),
            (
                workload("Deployment", selector={"matchLabels": {"app": "api"}}),
                "spec.selector",
                "does not select",
            ),
            ({"kind": "Deployment", "metadata": {"name": "web"}}, "spec", "required"),
            ({"kind": "Deployment", "metadata": {"name": "web"}, "spec": []}, "spec", "object"),
            ({"kind": "Service", "metadata": {"name": "web"}}, "kind", "Deployment"),
            ({"metadata": {"name": "web"}}, "kind", "required"),
        ],
    )
    def test_bad_workloads(self, document, path, words):
        with pytest.raises(PodError) as caught:
            expand(document)
        assert caught.value.path == path
        assert words in caught.value.message
        assert caught.value.document == describe(document)

    def test_selector_matching_template_is_fine(self):
        pods = expand(workload("Deployment", replicas=2, selector={"matchLabels": {"app": "web"}}))
        assert len(pods) == 2


# --------------------------------------------------------------------------------------------
# Whole streams

STREAM = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec: {template: {spec: {requirements: []}}}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec: {amiSelectorTerms: [{alias: al2023@latest}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          image: nginx
          resources: {requests: {cpu: 500m, memory: 1Gi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
---
# an empty document
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: pg, image: postgres, resources: {limits: {cpu: "2", memory: 4Gi}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  parallelism: 2
  completions: 10
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: tool, resources: {requests: {cpu: 100m}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-exporter, namespace: monitoring}
spec:
  selector: {matchLabels: {app: node-exporter}}
  template:
    metadata: {labels: {app: node-exporter}}
    spec:
      hostNetwork: true
      containers:
        - name: exporter
          image: prom/node-exporter
          ports: [{containerPort: 9100}]
          resources: {requests: {cpu: 50m, memory: 64Mi}}
---
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1
  labels: {topology.kubernetes.io/zone: us-east-1a}
status:
  allocatable: {cpu: "4", memory: 15Gi, pods: "58"}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: default}
spec:
  nodeName: ip-10-0-1-1
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  schedulingGates: [{name: example.com/wait}]
  containers: [{name: c, image: x}]
"""


@pytest.fixture(scope="module")
def result() -> Workloads:
    return expand_all(yaml.safe_load_all(STREAM))


class TestExpandAll:
    def test_pods(self, result):
        assert [p.key for p in result.pods] == [
            "shop/web-0",
            "shop/web-1",
            "shop/web-2",
            "default/db-0",
            "default/migrate-0",
            "default/migrate-1",
            "default/running",
            "default/gated",
        ]
        assert [p.key for p in result.pending] == [
            "shop/web-0",
            "shop/web-1",
            "shop/web-2",
            "default/db-0",
            "default/migrate-0",
            "default/migrate-1",
        ]
        db = result.pods[3]
        assert db.requests == {"cpu": 2000, "memory": 4 * GI, "pods": 1}

    def test_daemonsets(self, result):
        (daemonset,) = result.daemonsets
        assert daemonset.key == "monitoring/node-exporter"
        assert daemonset.requests == {"cpu": 50, "memory": 64 * 2**20, "pods": 1}
        assert daemonset.pod.host_ports[0].port == 9100

    def test_nodes_with_their_bound_pods(self, result):
        (existing,) = result.nodes
        assert existing.name == "ip-10-0-1-1"
        assert [p.key for p in existing.pods] == ["default/running"]
        assert existing.remaining()["cpu"] == 3000

    def test_policies_are_handed_back(self, result):
        assert [(d["kind"], d["metadata"]["name"]) for d in result.policies] == [
            ("NodePool", "general"),
            ("EC2NodeClass", "default"),
        ]

    def test_other_kinds_are_skipped_with_a_note(self, result):
        assert [(s.kind, s.name) for s in result.skipped] == [
            ("Service", "web"),
            ("ConfigMap", "settings"),
            ("CronJob", "nightly"),
        ]
        assert all(isinstance(s, Skipped) and s.note for s in result.skipped)
        kind, name, note = result.skipped[2]
        assert "schedule" in note

    def test_namespaces_are_kept_with_their_labels_for_namespace_selectors(self, result):
        assert result.namespaces == (("shop", {"kubernetes.io/metadata.name": "shop"}),)

    def test_empty_stream(self):
        assert expand_all([]) == Workloads()
        assert expand_all([None, None]) == Workloads()

    def test_kind_list_is_unrolled(self):
        listing = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [workload("Deployment", name="a"), workload("Deployment", name="b", replicas=2)],
        }
        typed = {"kind": "DeploymentList", "items": [{"metadata": {"name": "c"}, "spec": {"template": template()}}]}
        result = expand_all([listing, typed])
        assert [p.name for p in result.pods] == ["a-0", "b-0", "b-1", "c-0"]

    def test_error_names_document_and_field(self):
        documents = [workload("Deployment", name="ok"), workload("Deployment", template=template(memory="-1Gi"))]
        with pytest.raises(PodError) as caught:
            expand_all(documents)
        assert str(caught.value) == (
            "Deployment web: spec.template.spec.containers[0].resources.requests.memory: "
            "must not be negative (got '-1Gi'); requests and limits are 0 or more"
        )

    def test_unnamed_and_kindless_documents_say_where_they_are(self):
        with pytest.raises(PodError) as caught:
            expand_all([workload("Deployment"), {"kind": "Deployment", "spec": {"template": template()}}])
        assert caught.value.document == "Deployment (document 2)" and caught.value.path == "metadata.name"
        with pytest.raises(PodError) as caught:
            expand_all([{"metadata": {"name": "x"}}])
        assert caught.value.document == "document 1" and caught.value.path == "kind"
        with pytest.raises(PodError) as caught:
            expand_all([["not", "a", "mapping"]])
        assert caught.value.document == "document 1"

    def test_duplicate_names_are_rejected(self):
        with pytest.raises(PodError) as caught:
            expand_all([workload("Deployment", replicas=2), workload("StatefulSet", replicas=1)])
        assert "default/web-0" in caught.value.message and "Deployment web" in caught.value.message
        assert caught.value.document == "StatefulSet web"
        with pytest.raises(PodError):
            expand_all([node("n"), node("n")])
        with pytest.raises(PodError):
            expand_all([workload("DaemonSet"), workload("DaemonSet")])
        # same name in another namespace is fine
        result = expand_all([workload("Deployment"), workload("Deployment", namespace="other")])
        assert len(result.pods) == 2

    def test_a_stream_past_the_pod_limit_is_refused_at_the_document_that_crosses_it(self):
        documents = [workload("Deployment", name="a", replicas=3), workload("Deployment", name="b", replicas=2)]
        assert len(expand_all(documents, max_pods=5).pods) == 5
        with pytest.raises(PodError) as caught:
            expand_all(documents, max_pods=4)
        assert str(caught.value) == "Deployment b: takes the input past 4 pods, the most planned at once here"


# --------------------------------------------------------------------------------------------
# Scale and purity


def test_twenty_thousand_replicas_share_their_constraints():
    spec = {
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["pod-template-hash"],
            }
        ],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "web"}},
                        },
                    }
                ]
            }
        },
    }
    document = workload("Deployment", replicas=20_000, template=template(**spec))
    started = time.perf_counter()
    result = expand_all([document])
    elapsed = time.perf_counter() - started
    pods = result.pods
    assert len(pods) == 20_000
    assert pods[0].name == "web-0" and pods[-1].name == "web-19999"
    assert len({p.key for p in pods}) == 20_000
    first = pods[0]
    for pod in (pods[1], pods[9_999], pods[-1]):
        assert pod.labels is first.labels
        assert pod.requests is first.requests
        assert pod.node_selector is first.node_selector
        assert pod.tolerations is first.tolerations
        assert pod.topology_spread is first.topology_spread
        assert pod.pod_anti_affinity is first.pod_anti_affinity
        assert pod.shape_key is first.shape_key
    assert len({p.shape_key for p in pods}) == 1
    print(f"expanded 20,000 replicas in {elapsed * 1000:.0f} ms")


def test_the_core_imports_no_framework():
    code = textwrap.dedent(
        """
        import sys
        import provisioning.scheduling.pods, provisioning.scheduling.workloads
        banned = [m for m in ("django", "boto3", "botocore", "kubernetes", "redis") if m in sys.modules]
        print(",".join(banned))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
