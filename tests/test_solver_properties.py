"""Properties of THE solver over random snapshots (hypothesis), judged by THE verifier.

Random NodePools (requirements on zone, architecture, category, capacity type and cpu,
minValues, taints, limits, weights) over real instance types, random workloads with every
constraint kind (node selectors and affinities, tolerations, topology spreads on zone, hostname
and capacity type, required and preferred pod affinity and anti-affinity, host ports), nodes
already running pods (some with anti-affinity), and DaemonSets. Two properties:

* soundness: THE verifier finds nothing wrong with any plan;
* completeness: a pod that fits alone on a new node of some NodePool, with room left under
  its limits, and that no required topology rule or affinity concerns, is never left pending.

``make test`` runs a few hundred examples; ``make fuzz-solver`` (HYPOTHESIS_PROFILE=fuzz) runs
thousands.
"""

from __future__ import annotations

import os
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioning.scheduling.pods import Pod
from provisioning.scheduling.requirements import INSTANCE_TYPE_LABELS, Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.solver import solve
from provisioning.scheduling.taints import Taint, untolerated
from provisioning.scheduling.verify import verify
from provisioning.scheduling.workloads import DaemonSetOverhead, ExistingNode

settings.register_profile(
    "default", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "fuzz", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f")
ZONE, ARCH, CT, HOST = (
    "topology.kubernetes.io/zone",
    "kubernetes.io/arch",
    "karpenter.sh/capacity-type",
    "kubernetes.io/hostname",
)
CATEGORY, CPU, FAMILY = (
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-family",
)
TYPES = [
    "t3.micro",
    "t3.small",
    "t3.medium",
    "t3.large",
    "c5.large",
    "c5.xlarge",
    "c5.2xlarge",
    "c5.4xlarge",
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "m5.4xlarge",
    "r5.large",
    "r5.xlarge",
    "r5.2xlarge",
    "c6g.large",
    "c6g.xlarge",
    "c6g.2xlarge",
    "m6g.large",
    "m6g.xlarge",
    "m6g.4xlarge",
    "r6g.large",
    "r6g.2xlarge",
    "c7i.large",
    "c7i.2xlarge",
    "m7i.xlarge",
    "g4dn.xlarge",
    "g4dn.2xlarge",
]


@cache
def instance_types():
    from provisioning.services.catalog import bundled_catalog

    catalog = bundled_catalog("us-east-1")
    wanted = set(TYPES)
    out = []
    for it in catalog.instance_types({"amiSelectorTerms": [{"alias": "al2023@latest"}]}):
        if it.name in wanted:
            offerings = tuple(o for o in it.offerings if o.zone in ZONES)
            out.append(type(it)(it.name, it.labels, it.capacity, it.overhead, offerings))
    return tuple(out)


# ------------------------------------------------------------------ strategies


def requirement(key, operator, values=(), min_values=None):
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    if min_values:
        out["minValues"] = min_values
    return out


@st.composite
def nodepools(draw, index: int):
    reqs = [requirement("karpenter.sh/nodepool", "In", [f"pool{index}"])]
    if draw(st.booleans()):
        reqs.append(
            requirement(CT, "In", draw(st.lists(st.sampled_from(["spot", "on-demand"]), min_size=1, unique=True)))
        )
    if draw(st.booleans()):
        reqs.append(
            requirement(ARCH, "In", draw(st.lists(st.sampled_from(["amd64", "arm64"]), min_size=1, unique=True)))
        )
    if draw(st.booleans()):
        reqs.append(requirement(CATEGORY, "In", draw(st.lists(st.sampled_from("tcmrg"), min_size=1, unique=True))))
    if draw(st.booleans()):
        reqs.append(requirement(ZONE, "In", draw(st.lists(st.sampled_from(ZONES), min_size=1, unique=True))))
    if draw(st.integers(0, 4)) == 0:
        reqs.append(requirement(CPU, draw(st.sampled_from(["Gt", "Lt"])), [str(draw(st.sampled_from([2, 4, 8])))]))
    if draw(st.integers(0, 4)) == 0:
        reqs.append(requirement(FAMILY, "Exists", min_values=draw(st.integers(2, 3))))
    taints = ()
    if draw(st.integers(0, 3)) == 0:
        taints = (Taint(f"dedicated{index}", "yes", draw(st.sampled_from(["NoSchedule", "PreferNoSchedule"]))),)
    limits = {}
    if draw(st.integers(0, 3)) == 0:
        limits["cpu"] = draw(st.sampled_from([4000, 8000, 16000, 64000]))
    labels = {"karpenter.sh/nodepool": f"pool{index}"}
    return NodePoolInput(
        name=f"pool{index}",
        requirements=Requirements.from_list(reqs),
        instance_types=instance_types(),
        weight=draw(st.integers(0, 20)),
        labels=labels,
        taints=taints,
        limits=limits,
    )


def _term(key, labels, weight=None):
    term = {"topologyKey": key, "labelSelector": {"matchLabels": labels}}
    return {"weight": weight, "podAffinityTerm": term} if weight else term


@st.composite
def workload(draw, index: int, pools: list[NodePoolInput], apps: list[str]):
    app = f"app{index}"
    labels = {"app": app}
    spec: dict = {
        "containers": [
            {
                "name": "c",
                "image": "i",
                "resources": {
                    "requests": {
                        "cpu": draw(st.sampled_from(["100m", "250m", "500m", "1", "2", "3"])),
                        "memory": draw(st.sampled_from(["128Mi", "512Mi", "1Gi", "2Gi", "4Gi"])),
                    }
                },
            }
        ]
    }
    if draw(st.integers(0, 3)) == 0:
        key, value = draw(
            st.sampled_from([(ZONE, z) for z in ZONES] + [(ARCH, "amd64"), (ARCH, "arm64"), (CT, "on-demand")])
        )
        spec["nodeSelector"] = {key: value}
    affinity: dict = {}
    if draw(st.integers(0, 4)) == 0:
        expression = requirement(CATEGORY, "In", draw(st.lists(st.sampled_from("tcmr"), min_size=1, unique=True)))
        affinity["nodeAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [expression]}}
            ]
        }
    tolerated = [p.taints[0] for p in pools if p.taints]
    if tolerated and draw(st.booleans()):
        taint = draw(st.sampled_from(tolerated))
        spec["tolerations"] = [{"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}]
    spreads = []
    for key in draw(st.lists(st.sampled_from([ZONE, HOST, CT]), max_size=2, unique=True)):
        spreads.append(
            {
                "maxSkew": draw(st.integers(1, 2)),
                "topologyKey": key,
                "whenUnsatisfiable": draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])),
                "labelSelector": {"matchLabels": labels},
            }
        )
    if spreads:
        spec["topologySpreadConstraints"] = spreads
    others = apps or [app]
    for kind in ("podAffinity", "podAntiAffinity"):
        choice = draw(st.integers(0, 5))
        if choice == 0:
            target = draw(st.sampled_from([app, *others]))
            affinity[kind] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    _term(draw(st.sampled_from([ZONE, HOST])), {"app": target})
                ]
            }
        elif choice == 1:
            target = draw(st.sampled_from([app, *others]))
            affinity[kind] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    _term(draw(st.sampled_from([ZONE, HOST])), {"app": target}, 50)
                ]
            }
    if affinity:
        spec["affinity"] = affinity
    if draw(st.integers(0, 6)) == 0:
        spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": draw(st.sampled_from([8080, 9100]))}]
    replicas = draw(st.integers(1, 8))
    from provisioning.scheduling.podspec import pod_from_template

    first = pod_from_template({"metadata": {"labels": labels}, "spec": spec}, namespace="default", name=f"{app}-0")
    return [first] + [first.renamed(f"{app}-{i}") for i in range(1, replicas)]


@st.composite
def existing_nodes(draw, pools: list[NodePoolInput]):
    nodes = []
    types = instance_types()
    for i in range(draw(st.integers(0, 3))):
        it = draw(st.sampled_from(types))
        offering = draw(st.sampled_from(it.available_offerings()))
        pool = draw(st.sampled_from(pools))
        name = f"node{i}"
        labels = {**it.labels, ZONE: offering.zone, CT: offering.capacity_type, HOST: name, **pool.labels}
        labels["karpenter.sh/initialized"] = "true"
        pods = []
        for j in range(draw(st.integers(0, 3))):
            spec = {
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}],
                "nodeName": name,
            }
            if draw(st.integers(0, 2)) == 0:
                spec["affinity"] = {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            _term(draw(st.sampled_from([ZONE, HOST])), {"app": f"app{draw(st.integers(0, 3))}"})
                        ]
                    }
                }
            labels_of_pod = {"app": f"app{draw(st.integers(0, 4))}"}
            pods.append(
                Pod.from_manifest(
                    {"kind": "Pod", "metadata": {"name": f"bound-{i}-{j}", "labels": labels_of_pod}, "spec": spec}
                )
            )
        nodes.append(ExistingNode(name, labels, tuple(pool.taints), it.allocatable, it.capacity, pods=tuple(pods)))
    return nodes


@st.composite
def daemonsets(draw):
    from provisioning.scheduling.podspec import pod_from_template

    out = []
    for i in range(draw(st.integers(0, 2))):
        spec: dict = {
            "containers": [{"name": "d", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]
        }
        if draw(st.booleans()):
            spec["containers"][0]["ports"] = [{"containerPort": 9100, "hostPort": 9100}]
        if draw(st.booleans()):
            spec["nodeSelector"] = {ARCH: draw(st.sampled_from(["amd64", "arm64"]))}
        pod = pod_from_template(
            {"metadata": {"labels": {"ds": str(i)}}, "spec": spec},
            namespace="kube-system",
            name=f"ds{i}",
            is_daemonset=True,
        )
        out.append(DaemonSetOverhead("kube-system", f"ds{i}", pod))
    return out


@st.composite
def snapshots(draw):
    pools = [draw(nodepools(i)) for i in range(draw(st.integers(1, 3)))]
    pods: list[Pod] = []
    apps: list[str] = []
    for i in range(draw(st.integers(1, 5))):
        pods += draw(workload(i, pools, apps))
        apps.append(f"app{i}")
    nodes = draw(existing_nodes(pools))
    in_use = {}
    for node in nodes:
        pool = node.labels["karpenter.sh/nodepool"]
        used = in_use.setdefault(pool, {"nodes": 0})
        used["nodes"] += 1
        for resource, amount in node.capacity.items():
            used[resource] = used.get(resource, 0) + amount
    from dataclasses import replace

    pools = [replace(p, in_use=in_use.get(p.name, {})) for p in pools]
    return Snapshot(tuple(pods), tuple(pools), tuple(nodes), tuple(draw(daemonsets())), deadline_seconds=600)


# ------------------------------------------------------------------ the properties


@pytest.mark.slow
@given(snapshots())
def test_every_plan_verifies_clean_and_no_pod_that_fits_alone_stays_pending(snapshot):
    plan = solve(snapshot)
    violations = verify(snapshot, plan)
    assert not violations, "\n".join(map(str, violations))
    for key, reason in plan.unschedulable.items():
        pod = next(p for p in snapshot.pods if p.key == key)
        pool = _fits_alone(pod, snapshot, plan)
        assert pool is None, f"{key} fits alone on a new node of {pool} but is unschedulable: {reason}"


def _constrained(pod: Pod, snapshot: Snapshot) -> bool:
    """A required topology rule or affinity concerns the pod (its own, or another's anti-affinity)."""
    if any(c.hard for c in pod.topology_spread) or pod.pod_affinity.required or pod.pod_anti_affinity.required:
        return True
    if pod.host_ports:
        return True
    everyone = list(snapshot.pods) + [p for n in snapshot.nodes for p in n.pods]
    return any(
        term.selects(pod.namespace, pod.labels)
        for other in everyone
        if other is not pod
        for term in other.pod_anti_affinity.required
    )


def _fits_alone(pod: Pod, snapshot: Snapshot, plan) -> str | None:
    """The NodePool one of whose types would hold the pod alone on a new node, under its
    limits after the plan's claims, or None. Computed here, without the solver."""
    if _constrained(pod, snapshot):
        return None
    base = Requirements.from_labels(dict(pod.node_selector))
    for pool in snapshot.nodepools:
        if untolerated(pod.tolerations, pool.taints, ignore_prefer_no_schedule=True) is not None:
            continue
        if pool.requirements.compatible(base) is not None:
            continue
        requirements = pool.requirements.merge(base)
        label_keys = INSTANCE_TYPE_LABELS | {k for t in pool.instance_types for k in t.labels}
        on_type = requirements.only(label_keys)
        zone, ct = requirements.get(ZONE), requirements.get(CT)
        planned = [c for c in plan.claims if c.nodepool == pool.name]
        fitting = []
        for it in pool.instance_types:
            if not on_type.matches(it.labels):
                continue
            if not any(
                (zone is None or zone.has(o.zone)) and (ct is None or ct.has(o.capacity_type))
                for o in it.available_offerings()
            ):
                continue
            overhead: dict[str, int] = {}
            for daemon in snapshot.daemonsets:
                if untolerated(daemon.pod.tolerations, pool.taints, ignore_prefer_no_schedule=True) is not None:
                    continue
                selector = Requirements.from_labels(dict(daemon.pod.node_selector))
                if (
                    not selector.only(label_keys).matches(it.labels)
                    or pool.requirements.compatible(selector) is not None
                ):
                    continue
                for resource, amount in daemon.requests.items():
                    overhead[resource] = overhead.get(resource, 0) + amount
            allocatable = it.allocatable
            if any(amount + overhead.get(r, 0) > allocatable.get(r, 0) for r, amount in pod.requests.items()):
                continue
            if not _under_limits(pool, it, planned, snapshot):
                continue
            fitting.append(it)
        if not fitting:
            continue
        needed = [(k, r.min_values) for k, r in requirements.items() if r.min_values]
        if any(len({t.labels.get(k) for t in fitting} - {None}) < n for k, n in needed):
            continue
        return pool.name
    return None


def _under_limits(pool: NodePoolInput, it, planned, snapshot: Snapshot) -> bool:
    if not pool.limits:
        return True
    types = {t.name: t for t in pool.instance_types}
    for resource, limit in pool.limits.items():
        used = pool.in_use.get(resource, 0)
        for claim in planned:
            used += max(types[o.instance_type].capacity.get(resource, 0) for o in claim.options)
        if used + it.capacity.get(resource, 0) > limit:
            return False
    return True
