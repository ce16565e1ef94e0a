"""Benchmark scenarios for the solver: pending pods, one NodePool over the real catalog.

Two kinds:

* ``upstream``: the pod mix of Karpenter's scheduling benchmark (``makeDiversePods``), five
  equal parts with the remainder filled by generic pods:

  1. generic pods (label ``my-label`` from 7 values);
  2. zone spread: ``topologySpreadConstraints`` on ``topology.kubernetes.io/zone``, maxSkew 1,
     DoNotSchedule, selecting a random ``my-label`` value (drawn apart from the pod's own);
  3. hostname spread: the same on ``kubernetes.io/hostname``;
  4. zone self-affinity: required podAffinity on the zone to the pod's own ``my-affinity`` label;
  5. hostname anti-affinity: every pod labelled ``app=nginx`` with required podAntiAffinity on
     the hostname to ``app=nginx`` (one such pod per node);

  each pod requesting cpu from {100m, 250m, 500m, 1, 1.5} and memory from {100, 256, 512,
  1024, 2048, 4096}Mi at random. Upstream's RNG is seeded with 42; so is this one (Python's,
  so the draws differ from Go's, the distribution does not).
  ``upstream-self``: the same mix with every topology group selecting its own pods (each
  spread and affinity on the pod's own label value), as Deployments spread themselves.
* ``cost``: mixed shapes, where packing choices decide the price: memory-heavy and CPU-heavy
  pods together, many small pods with a few big ones, a spread of microservice shapes, the
  upstream request mix without constraints; and the mixes users run that the earlier cost
  work did not cover: microservices with GPU pods (``gpu``), with DaemonSets on every node
  (``daemonsets``), and with a third of the pods on arm64 and a third on amd64 (``arch``).

The NodePool allows every family of the catalog, spot and on-demand, amd64 and arm64. The
bundled us-east-1 snapshot has on-demand prices only; ``instance_types(simulated_spot=True)``
adds the simulated spot market, so spot offerings become available.

Pods of one shape are parsed once and copied under new names (``Pod.renamed``), as workload
expansion does for a Deployment's replicas.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.podspec import pod_from_template
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.workloads import DaemonSetOverhead

REGION = "us-east-1"
SEED = 42
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"

UPSTREAM_CPU = ("100m", "250m", "500m", "1", "1.5")
UPSTREAM_MEMORY = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")

NODEPOOL_REQUIREMENTS = (
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
)


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "upstream" | "cost"
    size: int  # pods
    description: str
    build: Callable[[], list[Pod]]
    daemonsets: Callable[[], list[DaemonSetOverhead]] = lambda: []

    def pods(self) -> list[Pod]:
        return self.build()


# -- building pods ------------------------------------------------------------------------------


class _Factory:
    """Pods from templates: each distinct template is parsed once, then renamed per replica."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self._parsed: dict[str, Pod] = {}
        self._serial = 0
        self.replicas: dict[str, int] = {}  # template (JSON) → pods made from it, in order of first use

    def pod(self, group: str, spec: dict, labels: dict[str, str]) -> Pod:
        template = {"metadata": {"labels": labels}, "spec": spec}
        key = json.dumps(template, sort_keys=True)
        name = f"{group}-{self._serial}"
        self._serial += 1
        self.replicas[key] = self.replicas.get(key, 0) + 1
        first = self._parsed.get(key)
        if first is None:
            first = self._parsed[key] = pod_from_template(template, namespace=self.namespace, name=name)
            return first
        return first.renamed(name)


def _container(cpu: str, memory: str) -> list[dict]:
    return [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]


def upstream_pods(
    count: int, seed: int = SEED, self_selecting: bool = False, factory: _Factory | None = None
) -> list[Pod]:
    """Upstream's ``makeDiversePods(count)``; ``self_selecting``: each spread selects the
    pod's own label value instead of a random one."""
    rng = random.Random(seed)
    factory = factory or _Factory()
    part = count // 5

    def requests() -> list[dict]:
        return _container(rng.choice(UPSTREAM_CPU), rng.choice(UPSTREAM_MEMORY))

    def generic(n: int) -> list[Pod]:
        return [
            factory.pod("generic", {"containers": requests()}, {"my-label": rng.choice(LABEL_VALUES)}) for _ in range(n)
        ]

    def spread(n: int, key: str, group: str) -> list[Pod]:
        out = []
        for _ in range(n):
            labels = {"my-label": rng.choice(LABEL_VALUES)}
            selected = rng.choice(LABEL_VALUES)
            constraint = {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"my-label": labels["my-label"] if self_selecting else selected}},
            }
            spec = {"containers": requests(), "topologySpreadConstraints": [constraint]}
            out.append(factory.pod(group, spec, labels))
        return out

    def affinity(n: int) -> list[Pod]:
        out = []
        for _ in range(n):
            labels = {"my-affinity": rng.choice(LABEL_VALUES)}
            term = {"labelSelector": {"matchLabels": labels}, "topologyKey": ZONE}
            spec = {
                "containers": requests(),
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
            }
            out.append(factory.pod("zone-affinity", spec, labels))
        return out

    def anti_affinity(n: int) -> list[Pod]:
        labels = {"app": "nginx"}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}
        out = []
        for _ in range(n):
            spec = {
                "containers": requests(),
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
            }
            out.append(factory.pod("host-anti-affinity", spec, labels))
        return out

    pods = generic(part)
    pods += spread(part, ZONE, "zone-spread")
    pods += spread(part, HOSTNAME, "host-spread")
    pods += affinity(part)
    pods += anti_affinity(part)
    pods += generic(count - len(pods))
    return pods


def upstream_manifests(count: int, seed: int = SEED, self_selecting: bool = False) -> list[dict]:
    """The same pods as ``upstream_pods`` as a user applies them: one Deployment per distinct
    pod template, with as many replicas as pods of it, after the NodePool and EC2NodeClass."""
    factory = _Factory()
    upstream_pods(count, seed, self_selecting, factory)
    documents: list[dict] = [
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            },
        },
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [dict(r) for r in NODEPOOL_REQUIREMENTS],
                    }
                }
            },
        },
    ]
    for n, (key, replicas) in enumerate(factory.replicas.items()):
        template = json.loads(key)
        template["metadata"]["labels"] = {**template["metadata"]["labels"], "bench/deployment": f"d{n}"}
        documents.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"d{n}", "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"bench/deployment": f"d{n}"}},
                    "template": template,
                },
            }
        )
    return documents


def deployments(groups: Sequence[tuple], seed: int = SEED) -> list[Pod]:
    """Replicas of plain deployments: ``(name, replicas, cpu, memory[, extra spec])``, shuffled
    together; the extra spec adds requests (``{"nvidia.com/gpu": "1"}``) and a node selector."""
    factory = _Factory()
    pods = []
    for name, replicas, cpu, memory, *rest in groups:
        extra = dict(rest[0]) if rest else {}
        selector = extra.pop("nodeSelector", None)
        spec: dict = {"containers": _container(cpu, memory)}
        spec["containers"][0]["resources"]["requests"].update(extra)
        if selector:
            spec["nodeSelector"] = selector
        pods += [factory.pod(name, spec, {"app": name}) for _ in range(replicas)]
    random.Random(seed).shuffle(pods)
    return pods


def _scaled(groups: Sequence[tuple], total: int) -> list[tuple]:
    """The groups with replicas scaled so they add up to about ``total`` (each at least 1)."""
    base = sum(group[1] for group in groups)
    return [(name, max(1, round(replicas * total / base)), *rest) for name, replicas, *rest in groups]


MEM_CPU = (
    # memory-heavy
    ("cache", 150, "500m", "12Gi"),
    ("jvm", 150, "1", "8Gi"),
    # cpu-heavy
    ("encoder", 150, "2", "1Gi"),
    ("analytics", 150, "4", "2Gi"),
)

SMALL_BIG = (
    ("sidecar-a", 400, "100m", "128Mi"),
    ("sidecar-b", 300, "250m", "256Mi"),
    ("worker", 250, "250m", "512Mi"),
    ("db", 34, "4", "16Gi"),
    ("search", 16, "14", "56Gi"),
)

SERVICES = (
    ("frontend", 500, "250m", "512Mi"),
    ("api", 500, "500m", "1Gi"),
    ("auth", 150, "250m", "256Mi"),
    ("catalog", 250, "1", "2Gi"),
    ("cart", 200, "500m", "2Gi"),
    ("session-cache", 150, "250m", "4Gi"),
    ("recommender", 150, "1", "6Gi"),
    ("search", 100, "2", "8Gi"),
    ("image-resize", 250, "2", "1Gi"),
    ("video-encode", 100, "4", "2Gi"),
    ("ml-inference", 100, "3", "4Gi"),
    ("queue-worker", 300, "500m", "512Mi"),
    ("reporting", 150, "1500m", "3Gi"),
    ("metrics", 100, "250m", "1Gi"),
)


GPU = {"nvidia.com/gpu": "1"}
# Microservices with GPU inference and training beside them.
GPU_MIX = (
    *SERVICES[:8],
    ("inference", 120, "2", "8Gi", GPU),
    ("inference-large", 40, "6", "24Gi", GPU),
    ("training", 12, "16", "96Gi", {"nvidia.com/gpu": "4"}),
    ("embedding", 60, "1", "4Gi", GPU),
)
# A third on Graviton, a third on x86, a third where either runs.
ARCH_MIX = tuple(
    (
        f"{name}-{arch or 'any'}",
        max(1, replicas // 3),
        cpu,
        memory,
        {"nodeSelector": {"kubernetes.io/arch": arch}} if arch else {},
    )
    for name, replicas, cpu, memory in SERVICES
    for arch in ("arm64", "amd64", None)
)
# What runs on every node of a real cluster.
DAEMONSETS = (
    ("kube-proxy", "100m", "128Mi"),
    ("aws-node", "50m", "128Mi"),
    ("log-agent", "200m", "256Mi"),
    ("node-exporter", "100m", "64Mi"),
)


def daemonsets() -> list[DaemonSetOverhead]:
    factory = _Factory("kube-system")
    return [
        DaemonSetOverhead("kube-system", name, factory.pod(name, {"containers": _container(cpu, memory)}, {"ds": name}))
        for name, cpu, memory in DAEMONSETS
    ]


def upstream_shapes(count: int, seed: int = SEED) -> list[Pod]:
    """Upstream's request mix, generic pods only (no spread, no affinity)."""
    rng = random.Random(seed)
    factory = _Factory()
    return [
        factory.pod("generic", {"containers": _container(rng.choice(UPSTREAM_CPU), rng.choice(UPSTREAM_MEMORY))}, {})
        for _ in range(count)
    ]


def _upstream(size: int, self_selecting: bool = False) -> Scenario:
    if self_selecting:
        return Scenario(
            f"upstream-self-{size}",
            "upstream",
            size,
            "upstream benchmark mix, every spread and affinity selecting its own pods",
            lambda: upstream_pods(size, self_selecting=True),
        )
    return Scenario(
        f"upstream-{size}",
        "upstream",
        size,
        "upstream benchmark mix: generic, zone spread, hostname spread, zone affinity, hostname anti-affinity",
        lambda: upstream_pods(size),
    )


def _cost(name: str, groups, total: int, description: str, with_daemonsets: bool = False) -> Scenario:
    scaled = _scaled(groups, total)
    size = sum(group[1] for group in scaled)
    return Scenario(
        f"{name}-{size}",
        "cost",
        size,
        description,
        lambda: deployments(scaled),
        daemonsets if with_daemonsets else (lambda: []),
    )


def _cost_scenarios(scale: float) -> list[Scenario]:
    generic = round(2000 * scale)
    return [
        _cost("mem-cpu", MEM_CPU, round(600 * scale), "memory-heavy and CPU-heavy deployments together"),
        _cost("small-big", SMALL_BIG, round(1000 * scale), "many small pods with a few big ones"),
        _cost("services", SERVICES, round(3000 * scale), "14 microservices of assorted shapes"),
        Scenario(
            f"generic-{generic}",
            "cost",
            generic,
            "upstream request mix, no spread or affinity",
            lambda: upstream_shapes(generic),
        ),
        _cost("gpu", GPU_MIX, round(2000 * scale), "microservices with GPU inference and training pods"),
        _cost("daemonsets", SERVICES, round(3000 * scale), "14 microservices, 4 DaemonSets on every node", True),
        _cost("arch", ARCH_MIX, round(3000 * scale), "microservices, a third arm64, a third amd64, a third either"),
    ]


def scenarios(quick: bool = False) -> list[Scenario]:
    """The full set (upstream mix at 5,000 and 20,000 pods), or a smaller smoke set."""
    if quick:
        return [_upstream(500), _upstream(2000), _upstream(2000, True), *_cost_scenarios(0.5)]
    return [_upstream(5000), _upstream(20000), _upstream(5000, True), _upstream(20000, True), *_cost_scenarios(1.0)]


def find(name: str) -> Scenario:
    """A scenario of either set by name, or ``upstream-N`` for any N."""
    for scenario in scenarios(False) + scenarios(True):
        if scenario.name == name:
            return scenario
    if name.startswith("upstream-self-") and name[len("upstream-self-") :].isdigit():
        return _upstream(int(name[len("upstream-self-") :]), True)
    if name.startswith("upstream-") and name[len("upstream-") :].isdigit():
        return _upstream(int(name[len("upstream-") :]))
    known = sorted({s.name for s in scenarios(False) + scenarios(True)})
    raise KeyError(f"no scenario {name!r}; known: {', '.join(known)} (or upstream-N)")


# -- the NodePool --------------------------------------------------------------------------------


@cache
def instance_types(simulated_spot: bool = False) -> tuple[InstanceType, ...]:
    """Every instance type of the bundled us-east-1 catalog (all families), with offerings."""
    from provisioning.cloud.catalog import Catalog, snapshot_path

    catalog = Catalog.from_snapshot(snapshot_path(REGION))
    if simulated_spot:
        from provisioning.cloud.simulated.spot import SimulatedPrices

        spot = SimulatedPrices(dict(catalog.on_demand), catalog.zones).spot_prices()
        catalog = catalog.with_spot(spot, "simulated spot market")
    return tuple(catalog.instance_types(None))


def nodepool(types: Sequence[InstanceType], name: str = "default") -> NodePoolInput:
    return NodePoolInput(
        name=name,
        requirements=Requirements.from_list(NODEPOOL_REQUIREMENTS),
        instance_types=tuple(types),
    )


def snapshot(
    pods: Sequence[Pod],
    types: Sequence[InstanceType],
    *,
    optimize: bool = True,
    daemonsets: Sequence[DaemonSetOverhead] = (),
) -> Snapshot:
    return Snapshot(pods=tuple(pods), nodepools=(nodepool(types),), daemonsets=tuple(daemonsets), optimize=optimize)
