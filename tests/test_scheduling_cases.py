"""The scheduling cases users hit, each on the real us-east-1 catalog with six zones where
zones matter: every one a plan Karpenter gets right (or would, but for a known upstream gap)
and that karpweb once got wrong. Each plan is also checked by THE verifier (the harness
refuses a plan it finds wrong)."""

from __future__ import annotations

import pytest
from upstream.harness import (
    ALL_ZONES,
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_FAMILY,
    INSTANCE_GPU_COUNT,
    ZONE,
    Env,
    affinity_term,
    daemon_set,
    namespace,
    node,
    node_pool,
    pod,
    requirement,
    skew_values,
    spread,
    unschedulable_pod,
    unschedulable_pods,
)

INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"


def general_pool(**options) -> dict:
    """The issue's NodePool: categories c, m, r; generation above 4; amd64; on-demand."""
    return node_pool(
        requirements=[
            requirement(INSTANCE_CATEGORY, "In", "c", "m", "r"),
            requirement(INSTANCE_GENERATION, "Gt", "4"),
            requirement(ARCH, "In", "amd64"),
            requirement(CAPACITY_TYPE, "In", "on-demand"),
        ],
        **options,
    )


@pytest.fixture
def six() -> Env:
    return Env(zones=ALL_ZONES)


def _replicas(app: str, count: int, cpu="500m", memory="1Gi", **options) -> list[dict]:
    return unschedulable_pods(count, labels={"app": app}, requests={"cpu": cpu, "memory": memory}, **options)


def test_a_zone_spread_uses_every_zone_its_types_are_offered_in(six):
    """12 replicas spread by zone (maxSkew 1): us-east-1e offers none of the pool's types and
    does not count; the other five zones take 2 or 3 each, us-east-1f included."""
    six.apply(general_pool())
    constraint = spread(ZONE, labels={"app": "web"})
    result = six.provision(_replicas("web", 12, topology_spread_constraints=[constraint]))
    assert not result.unschedulable
    counts = six.skew(constraint)
    assert skew_values(counts) == [2, 2, 2, 3, 3] and "us-east-1f" in counts and "us-east-1e" not in counts


def test_mixed_zone_spread_deployments_all_schedule(six):
    six.apply(general_pool())
    apps = {"web": (12, "500m", "1Gi"), "api": (9, "1", "2Gi"), "cache": (7, "250m", "4Gi"), "worker": (20, "2", "1Gi")}
    pods = []
    for app, (count, cpu, memory) in apps.items():
        pods += _replicas(app, count, cpu, memory, topology_spread_constraints=[spread(ZONE, labels={"app": app})])
    result = six.provision(pods)
    assert not result.unschedulable
    for app in apps:
        values = skew_values(six.skew(spread(ZONE, labels={"app": app})))
        assert max(values) - min(values) <= 1 and len(values) >= 3


def test_a_bound_pods_preferred_anti_affinity_does_not_block_the_next_replica():
    """Upstream tracks only the required anti-affinity of pods already running: with three zones
    each holding a replica, a 4th with a zone spread and a preferred zone anti-affinity to
    itself relaxes its own preference and schedules."""
    three = Env()
    three.apply(general_pool())
    options = {
        "labels": {"app": "web"},
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "topology_spread_constraints": [spread(ZONE, labels={"app": "web"})],
        "pod_anti_preferences": [affinity_term(ZONE, labels={"app": "web"}, weight=100)],
    }
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
        host = node(labels={ZONE: zone, ARCH: "amd64"}, allocatable={"cpu": "100m", "memory": "1Gi", "pods": "10"})
        three.apply(host, pod(node_name=host["metadata"]["name"], **options))
    fourth = unschedulable_pod(**options)
    three.provision(fourth)
    three.scheduled(fourth)


def test_a_bound_pods_required_anti_affinity_keeps_new_claims_out_of_its_zone(six):
    """A running pod in us-east-1a with a required zone anti-affinity against app=web: the web
    pods' NodeClaims may not launch in us-east-1a, in any of their options."""
    six.apply(general_pool())
    host = node(labels={ZONE: "us-east-1a"}, allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"})
    guard = pod(node_name=host["metadata"]["name"], pod_anti_requirements=[affinity_term(ZONE, labels={"app": "web"})])
    six.apply(host, guard)
    result = six.provision(_replicas("web", 3))
    assert result.claims and not result.unschedulable
    assert all(o.zone != "us-east-1a" for claim in result.claims for o in claim.options)


@pytest.mark.parametrize("key", [CAPACITY_TYPE, ARCH])
def test_a_bound_pods_required_anti_affinity_counts_on_any_key(key):
    """Upstream adds the inverse rule for every topology key, not only hostname and zone."""
    env = Env()
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "amd64", "arm64")]))
    value = "spot" if key == CAPACITY_TYPE else "arm64"
    host = node(labels={key: value}, allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"})
    env.apply(
        host, pod(node_name=host["metadata"]["name"], pod_anti_requirements=[affinity_term(key, labels={"app": "web"})])
    )
    pods = _replicas("web", 3)
    result = env.provision(pods)
    assert result.claims and not result.unschedulable
    assert all(env.scheduled(p).labels[key] != value for p in pods)


def test_namespace_selectors_select_pods_in_the_namespaces_they_name(six):
    """A pod affinity whose namespaceSelector picks the namespace of a running db pod joins its
    zone; an anti-affinity by namespaceSelector keeps another pod out of it."""
    six.apply(general_pool(), namespace("data", {"team": "storage"}), namespace("web"))
    host = node(labels={ZONE: "us-east-1b"}, allocatable={"cpu": "100m", "memory": "100Mi", "pods": "10"})
    db = pod(namespace="data", labels={"app": "db"}, node_name=host["metadata"]["name"])
    six.apply(host, db)
    near = unschedulable_pod(
        namespace="web",
        requests={"cpu": "1"},
        pod_requirements=[
            affinity_term(ZONE, labels={"app": "db"}, namespace_selector={"matchLabels": {"team": "storage"}})
        ],
    )
    far = unschedulable_pod(
        namespace="web",
        requests={"cpu": "1"},
        pod_anti_requirements=[
            affinity_term(ZONE, labels={"app": "db"}, namespace_selector={"matchLabels": {"team": "storage"}})
        ],
    )
    six.provision(near, far)
    assert six.scheduled(near).zone == "us-east-1b"
    assert six.scheduled(far).zone != "us-east-1b"


def test_a_requirement_on_an_instance_type_label_no_type_carries_is_not_met():
    """A catalog without GPU types (a region's with Graviton m6g only): a pod that needs
    instance-gpu-count > 0 stays pending, rather than getting an m6g.large it would not run on."""
    from dataclasses import replace

    from provisioning.services.catalog import bundled_catalog

    full = bundled_catalog("us-east-1")
    graviton = replace(full, infos={name: info for name, info in full.infos.items() if name.startswith("m6g.")})
    env = Env(catalog=graviton)
    env.apply(node_pool())
    gpu = unschedulable_pod(node_requirements=[requirement(INSTANCE_GPU_COUNT, "Gt", "0")])
    result = env.provision(gpu)
    env.not_scheduled(gpu)
    assert "instance-gpu-count" in result.unschedulable[f"default/{gpu['metadata']['name']}"]


def test_min_values_are_met_by_every_claim():
    """instance-family In [c5, m5, r5] with minValues 3: replicas that fill a claim to the size
    only two families have must not take it there."""
    env = Env()
    env.apply(
        node_pool(
            requirements=[
                requirement(INSTANCE_FAMILY, "In", "c5", "m5", "r5", min_values=3),
                requirement(CAPACITY_TYPE, "In", "on-demand"),
            ]
        )
    )
    result = env.provision(
        _replicas("web", 30), _replicas("mem", 5, cpu="3", memory="20Gi"), _replicas("big", 3, cpu="60", memory="100Gi")
    )
    assert result.claims and not result.unschedulable
    for claim in result.claims:
        families = {o.instance_type.split(".")[0] for o in claim.options}
        assert families == {"c5", "m5", "r5"}, claim.options


def test_pod_affinity_on_the_architecture_follows_the_pod_it_names():
    """kubernetes.io/arch is an instance-type label, and a topology domain like any other."""
    env = Env()
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "amd64", "arm64")]))
    host = node(labels={ARCH: "arm64"}, allocatable={"cpu": "100m", "memory": "100Mi", "pods": "10"})
    env.apply(host, pod(labels={"app": "db"}, node_name=host["metadata"]["name"]))
    follower = unschedulable_pod(requests={"cpu": "1"}, pod_requirements=[affinity_term(ARCH, labels={"app": "db"})])
    env.provision(follower)
    assert env.scheduled(follower).labels[ARCH] == "arm64"


def test_self_affinity_on_the_architecture_starts_a_group_where_no_pod_is_yet():
    """No NodePool requirement names the architecture: its domains come from the types."""
    env = Env()
    env.apply(node_pool())
    pods = _replicas("web", 4, pod_requirements=[affinity_term(ARCH, labels={"app": "web"})])
    result = env.provision(pods)
    assert not result.unschedulable
    assert len({env.scheduled(p).labels[ARCH] for p in pods}) == 1


def test_self_affinity_starts_in_a_zone_it_may_use_when_its_matches_are_elsewhere(six):
    """Replicas with required zone self-affinity and a node selector on us-east-1c, while a
    matching pod runs in us-east-1a where they may not go: they start their group in 1c."""
    six.apply(general_pool())
    host = node(labels={ZONE: "us-east-1a"}, allocatable={"cpu": "100m", "memory": "100Mi", "pods": "10"})
    six.apply(host, pod(labels={"app": "web"}, node_name=host["metadata"]["name"]))
    pods = _replicas(
        "web", 3, node_selector={ZONE: "us-east-1c"}, pod_requirements=[affinity_term(ZONE, labels={"app": "web"})]
    )
    six.provision(pods)
    assert {six.scheduled(p).zone for p in pods} == {"us-east-1c"}


def test_node_affinity_policy_honor_counts_only_nodes_the_pods_node_selector_allows(six):
    """Existing nodes of another tier, each with a selected pod, in us-east-1a and -1b: with
    nodeAffinityPolicy Honor (the default) a spread of tier=web pods does not count them (the
    pods' node selector excludes those nodes), so its replicas spread evenly over the zones."""
    six.apply(general_pool(labels={"tier": "web"}))
    for zone in ("us-east-1a", "us-east-1b"):
        host = node(labels={ZONE: zone, "tier": "db"}, allocatable={"cpu": "100m", "memory": "100Mi", "pods": "10"})
        six.apply(host, pod(labels={"app": "web"}, node_name=host["metadata"]["name"]))
    constraint = spread(ZONE, labels={"app": "web"})
    pods = _replicas("web", 5, node_selector={"tier": "web"}, topology_spread_constraints=[constraint])
    result = six.provision(pods)
    assert not result.unschedulable
    zones = sorted(six.scheduled(p).zone for p in pods)
    assert len(set(zones)) == 5  # one per zone of the pool's types; the tier=db nodes did not count


def test_a_preferred_node_affinity_does_not_shrink_the_zones_a_spread_counts(six):
    """Replicas preferring us-east-1a but spread by zone: the preference decides where the first
    goes, not which zones the spread's minimum is taken over."""
    six.apply(general_pool())
    constraint = spread(ZONE, labels={"app": "web"})
    pods = _replicas(
        "web", 5, node_preferences=[requirement(ZONE, "In", "us-east-1a")], topology_spread_constraints=[constraint]
    )
    result = six.provision(pods)
    assert not result.unschedulable
    assert skew_values(six.skew(constraint)) == [1, 1, 1, 1, 1]


def test_daemonset_host_ports_are_reserved_on_new_claims():
    """A DaemonSet on every node takes host port 9100: a pod wanting it cannot get a new node."""
    env = Env()
    env.apply(node_pool(), daemon_set(host_ports=[9100], requests={"cpu": "100m"}))
    exporter = unschedulable_pod(host_ports=[9100])
    other = unschedulable_pod(host_ports=[9200])
    env.provision(exporter, other)
    env.not_scheduled(exporter)
    env.scheduled(other)


def test_a_nodepool_being_deleted_launches_nothing():
    env = Env()
    env.apply(node_pool(deletion_timestamp="2026-12-01T00:00:00Z"))
    p = unschedulable_pod()
    result = env.provision(p)
    env.not_scheduled(p)
    assert not result.claims


def test_a_claim_whose_zone_is_open_blocks_every_zone_for_anti_affinity():
    """A pod the anti-affinity selects goes on a NodeClaim that may launch in any zone: the pod
    with the anti-affinity cannot be sure of a zone without it, so it waits (as upstream)."""
    env = Env()
    env.apply(node_pool())
    target = unschedulable_pod(labels={"security": "s2"}, requests={"cpu": "2"})
    guarded = unschedulable_pod(pod_anti_requirements=[affinity_term(ZONE, labels={"security": "s2"})])
    env.provision(target, guarded)
    env.scheduled(target)
    env.not_scheduled(guarded)


def test_hostname_anti_affinity_gives_each_replica_its_own_node(six):
    six.apply(general_pool())
    pods = _replicas("web", 6, pod_anti_requirements=[affinity_term(HOSTNAME, labels={"app": "web"})])
    six.provision(pods)
    assert len({six.scheduled(p).name for p in pods}) == 6


def test_a_nodepool_whose_limits_leave_too_few_families_hands_the_pods_to_the_next():
    """The heavier NodePool wants 3 instance families within 4 vCPUs. A big pod opens a claim
    there, then a small pod that avoids it opens another (a 2-vCPU type: 3 families hold it).
    Counting that one, the big pod's claim may only launch as a 2-vCPU type, and of those only
    m5.large and r5.large hold it: 2 families (Strict). Its pod goes to the other NodePool, as
    upstream's scheduler moves on to the next NodeClaim template; it is not left pending."""
    env = Env()
    families = node_pool(
        "families",
        weight=50,
        requirements=[
            requirement(INSTANCE_FAMILY, "In", "m5", "c5", "r5", min_values=3),
            requirement(CAPACITY_TYPE, "In", "on-demand"),
        ],
        limits={"cpu": "4"},
    )
    fallback = node_pool(
        "fallback", requirements=[requirement(CAPACITY_TYPE, "In", "on-demand")], limits={"cpu": "100"}
    )
    env.apply(families, fallback)
    big = unschedulable_pod(labels={"app": "big"}, requests={"cpu": "1500m", "memory": "3500Mi"})
    small = unschedulable_pod(
        requests={"cpu": "1", "memory": "1Gi"}, pod_anti_requirements=[affinity_term(HOSTNAME, labels={"app": "big"})]
    )
    result = env.provision(big, small)
    assert not result.unschedulable
    assert env.scheduled(small).labels["karpenter.sh/nodepool"] == "families"
    assert env.scheduled(big).labels["karpenter.sh/nodepool"] == "fallback"


def test_a_min_values_counts_accelerator_types_as_upstreams_exotic_filter_does():
    """Pods that ask for no GPU are kept off GPU types, unless a minValues is set: upstream's
    exotic filter then keeps them (filter.go), and here they make the third family."""
    env = Env()
    env.apply(
        node_pool(
            requirements=[
                requirement(INSTANCE_FAMILY, "In", "c5", "c7i", "g4dn", min_values=3),
                requirement(CAPACITY_TYPE, "In", "on-demand"),
            ]
        )
    )
    plain = unschedulable_pod(requests={"cpu": "1", "memory": "1Gi"})
    result = env.provision(plain)
    assert not result.unschedulable
    (claim,) = result.plan.claims
    assert {o.instance_type.split(".")[0] for o in claim.options} == {"c5", "c7i", "g4dn"}
    assert claim.chosen.instance_type.split(".")[0] != "g4dn"  # the cheapest, not the GPU


def test_replicas_spread_over_zones_are_packed_onto_nodes_sized_for_each_zones_share(six):
    """300 web and 120 api replicas, each spread by zone (maxSkew 1): each zone's share is
    packed like plain replicas, so the plan costs within 10% of the LP bound of the same pods
    with no zones at all (a bound no plan can beat). Joining claims a pod at a time stopped at
    small nodes (one more pod never pays for a bigger type's price step): 20% over it."""
    from provisioning.scheduling.lowerbound import PodClass, lp_lower_bound

    six.apply(general_pool())
    web, api = spread(ZONE, labels={"app": "web"}), spread(ZONE, labels={"app": "api"})
    result = six.provision(
        _replicas("web", 300, "250m", "512Mi", topology_spread_constraints=[web])
        + _replicas("api", 120, "500m", "1Gi", topology_spread_constraints=[api])
    )
    assert not result.unschedulable
    for constraint in (web, api):
        values = skew_values(six.skew(constraint))
        assert max(values) - min(values) <= 1 and len(values) == 5  # us-east-1e offers no type of the pool
    pool = result.snapshot.nodepools[0]
    wanted = pool.requirements.only({k for t in pool.instance_types for k in t.labels})

    def price(it):
        prices = [o.price for o in it.offerings if o.available and o.capacity_type == "on-demand"]
        return min(prices) if prices and wanted.matches(it.labels) else None

    classes = [
        PodClass(300, {"cpu": 250, "memory": 512 * 2**20, "pods": 1}),
        PodClass(120, {"cpu": 500, "memory": 2**30, "pods": 1}),
    ]
    bound = lp_lower_bound(classes, pool.instance_types, price=price)
    assert bound.status == "optimal"
    cost = sum(c.price for c in result.claims)
    assert cost <= bound.cost_per_hour * 1.10, (cost, bound.cost_per_hour)


def test_zone_shares_keep_the_spread_and_count_in_every_rule_that_selects_them(six):
    """Replicas shared out over the zones while other rules count them: 8 web pods already run
    on a node in us-east-1a with room for more, 10 canary pods carry the web label (the spread
    counts them, they own no rule), and a logger spreads by hostname over the nodes holding web
    pods (maxSkew 1), so it may only join a node the web pods' packing left no busier than the
    emptiest. ``provision`` replays every placement through THE verifier, which refuses a plan
    that breaks any of these. (The canaries need not keep the skew: a spread is checked for the
    pods that carry it, when each is placed.)"""
    six.apply(general_pool())
    host = node(labels={ZONE: "us-east-1a", ARCH: "amd64"}, allocatable={"cpu": "16", "memory": "64Gi", "pods": "110"})
    six.apply(host)
    for i in range(8):
        requests = {"cpu": "250m", "memory": "512Mi"}
        six.apply(pod(f"web-bound-{i}", labels={"app": "web"}, requests=requests, node_name=host["metadata"]["name"]))
    web = spread(ZONE, labels={"app": "web"})
    logger = spread(HOSTNAME, labels={"app": "web"})
    result = six.provision(
        _replicas("web", 120, "250m", "512Mi", topology_spread_constraints=[web])
        + _replicas("web", 10, "100m", "128Mi")
        + _replicas("logger", 12, "100m", "128Mi", topology_spread_constraints=[logger])
    )
    assert not result.unschedulable and len(result.bindings) == 142
    assert len(six.skew(web)) == 5  # us-east-1e offers no type of the pool
