"""The disruption round over rows: planned, re-checked 15 s later, drained and terminated;
do-not-disrupt and PodDisruptionBudgets keep nodes out, with the reason on the node."""

from __future__ import annotations

from datetime import timedelta

import pytest
from builders import CONSOLIDATE_AT_ONCE, nodepool, requirement
from django.utils import timezone

from provisioning.cluster import simulated
from provisioning.cluster.simulated import SimulatedCluster, node_manifest
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim
from provisioning.services import connections, disruption
from provisioning.services.catalog import bundled_catalog
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

NODEPOOL = nodepool(requirement("karpenter.sh/capacity-type", "on-demand"), disruption=CONSOLIDATE_AT_ONCE)


@pytest.fixture
def cluster(seed_ec2nodeclass, redis_url, settings, monkeypatch):
    settings.REDIS_URL = redis_url
    connections.reset()
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(NODEPOOL, source="cli")
    fake = _Cluster()
    monkeypatch.setattr(disruption, "get_cluster", lambda: fake)
    monkeypatch.setattr("provisioning.services.provision.get_cluster", lambda: fake, raising=False)
    yield fake
    connections.reset()


class _Cluster(SimulatedCluster):
    def __init__(self):
        self.budgets: list = []
        self.events: list = []

    def pdbs(self):
        return self.budgets

    def record_event(self, event):
        self.events.append(event)


def add_node(name: str, instance_type: str = "m5.xlarge", price: float = 0.192, annotations=None) -> ClusterNode:
    it = bundled_catalog().instance_type(instance_type)
    past = timezone.now() - timedelta(hours=1)
    claim = NodeClaim.objects.create(
        name=f"claim-{name}",
        nodepool_name="general",
        nodeclass_name="default",
        state=NodeClaim.State.INITIALIZED,
        instance_type=instance_type,
        zone="us-east-1a",
        capacity_type="on-demand",
        price_per_hour=price,
        node_name=name,
        launch_options=[
            {"instanceType": instance_type, "zone": "us-east-1a", "capacityType": "on-demand", "price": price}
        ],
        spec={"driftHashes": disruption.drift_hashes("general", "default")},
    )
    NodeClaim.objects.filter(pk=claim.pk).update(created_at=past, initialized_at=past)
    manifest = node_manifest(name, it, zone="us-east-1a", capacity_type="on-demand", nodepool="general")
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return ClusterNode.objects.create(
        name=name, manifest=manifest, nodeclaim=claim.name, nodepool="general", ready=True, last_pod_change_at=past
    )


def add_pod(name: str, node: str, labels=None, annotations=None) -> ClusterPod:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]
        },
    }
    return ClusterPod.objects.create(namespace="default", name=name, manifest=manifest, node_name=node, phase="Running")


def test_an_empty_node_is_planned_rechecked_and_terminated(cluster):
    add_node("ip-empty")
    add_node("ip-busy")
    add_pod("web-0", "ip-busy")
    now = timezone.now()
    planned = disruption.run(now)
    assert planned.reason == "Empty" and planned.nodes == ["ip-empty"] and planned.state == Disruption.State.PLANNED
    assert float(planned.savings_per_hour) == pytest.approx(0.192)
    disruption.run(now + timedelta(seconds=5))  # not yet re-checked
    planned.refresh_from_db()
    assert planned.state == Disruption.State.PLANNED
    disruption.run(now + timedelta(seconds=16))  # re-checked, tainted, drained
    planned.refresh_from_db()
    assert planned.state == Disruption.State.DRAINING and "once 5 s have passed" in planned.message
    disruption.run(now + timedelta(seconds=26))  # upstream's minDrainTime has passed
    planned.refresh_from_db()
    assert planned.state == Disruption.State.DONE and planned.finished_at is not None
    assert not ClusterNode.objects.filter(name="ip-empty").exists()
    assert NodeClaim.objects.get(name="claim-ip-empty").state == NodeClaim.State.TERMINATED


def test_a_plan_no_longer_valid_is_cancelled(cluster):
    add_node("ip-empty")
    now = timezone.now()
    planned = disruption.run(now)
    add_pod("late", "ip-empty")  # a pod landed meanwhile
    disruption.run(now + timedelta(seconds=16))
    planned.refresh_from_db()
    assert planned.state == Disruption.State.CANCELLED and "no longer valid" in planned.message


def test_a_cancelled_plan_says_what_the_recheck_found(cluster):
    add_node("ip-empty")
    now = timezone.now()
    planned = disruption.run(now)
    add_pod("keep", "ip-empty", annotations={"karpenter.sh/do-not-disrupt": "true"})
    disruption.run(now + timedelta(seconds=16))
    planned.refresh_from_db()
    assert planned.state == Disruption.State.CANCELLED
    assert planned.message.startswith("no longer valid when re-checked 15 s later: ip-empty: ")
    assert "default/keep" in planned.message and "do-not-disrupt" in planned.message


def test_a_node_whose_consolidation_its_recheck_cancelled_waits_a_minute_before_it_is_planned_again(cluster):
    add_node("ip-room", annotations={"karpenter.sh/do-not-disrupt": "true"})  # takes pods, never goes
    add_node("ip-light")
    add_pod("web-0", "ip-light")
    now = timezone.now()
    planned = disruption.run(now)
    assert planned.reason == "Underutilized" and planned.nodes == ["ip-light"] and not planned.replacement_plan
    room = ClusterNode.objects.get(name="ip-room")
    room.manifest["spec"]["unschedulable"] = True  # cordoned meanwhile: web-0 has nowhere to go
    room.save()
    disruption.run(now + timedelta(seconds=16))
    planned.refresh_from_db()
    assert planned.state == Disruption.State.CANCELLED and planned.started_at is None
    room.manifest["spec"].pop("unschedulable")
    room.save()
    assert disruption.run(now + timedelta(seconds=31)) is None
    note = ClusterNode.objects.get(name="ip-light").disruption_note
    assert note.startswith("its consolidation was cancelled on its re-check 15s ago") and note.endswith("in 45s")
    again = disruption.run(now + timedelta(seconds=77))
    assert again.pk != planned.pk and again.nodes == ["ip-light"] and again.state == Disruption.State.PLANNED


def test_do_not_disrupt_and_pdbs_keep_nodes_with_the_reason(cluster):
    add_node("ip-a", annotations={"karpenter.sh/do-not-disrupt": "true"})
    add_node("ip-b")
    add_pod("db-0", "ip-b", labels={"app": "db"})
    add_node("ip-c")
    add_pod("cache-0", "ip-c", annotations={"karpenter.sh/do-not-disrupt": "true"})
    cluster.budgets = [
        {
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0},
        }
    ]
    result = disruption.plan(timezone.now())
    assert not result.commands
    notes = dict(ClusterNode.objects.values_list("name", "disruption_note"))
    assert "do-not-disrupt" in notes["ip-a"]
    assert "PodDisruptionBudget default/db" in notes["ip-b"]
    assert "cache-0" in notes["ip-c"]


def test_a_changed_nodepool_template_drifts_its_nodes(cluster):
    add_node("ip-old")
    add_pod("web-0", "ip-old")
    changed = {
        **NODEPOOL,
        "spec": {
            **NODEPOOL["spec"],
            "template": {"metadata": {"labels": {"team": "a"}}, **NODEPOOL["spec"]["template"]},
        },
    }
    apply_manifest(changed, source="cli")
    result = disruption.plan(timezone.now())
    assert [c.reason for c in result.commands] == ["Drifted"]
    command = result.commands[0]
    assert command.candidates == ("ip-old",) and len(command.replacements) == 1  # its pod needs a home first


def test_simulated_pods_pend_again_after_their_node_is_deleted(cluster):
    add_node("ip-x")
    add_pod("web-0", "ip-x")
    simulated.SimulatedCluster().delete_node("ip-x")
    assert ClusterPod.objects.get().node_name == ""


def test_a_recheck_accepts_the_same_command_or_more_empty_nodes():
    from provisioning.disruption.model import Command

    def command(reason, *nodes):
        return Command(reason=reason, candidates=nodes, replacements=(), savings_per_hour=0.1, explanation="")

    empty = Disruption(reason="Empty", nodes=["a"])
    assert disruption._still_valid(empty, command("Empty", "a"))
    assert disruption._still_valid(empty, command("Empty", "a", "b"))  # a is still empty
    assert not disruption._still_valid(empty, command("Empty", "b"))
    consolidation = Disruption(reason="Underutilized", nodes=["a", "b"])
    assert disruption._still_valid(consolidation, command("Underutilized", "b", "a"))
    assert not disruption._still_valid(consolidation, command("Underutilized", "a", "b", "c"))
    assert not disruption._still_valid(consolidation, command("Empty", "a", "b"))


def test_a_repacking_is_rechecked_by_repacking_and_stands_when_its_nodes_still_repack(monkeypatch):
    from provisioning.disruption import planner
    from provisioning.disruption.model import Command

    def command(method, *nodes):
        return Command("Underutilized", nodes, (), 0.1, "", method=method)

    repacking = Disruption(
        reason="Underutilized",
        method="repacking",
        nodes=["a", "b", "c"],
        replacement_plan=[{"instanceTypes": ["m5.2xlarge"]}, {"instanceTypes": ["m5.2xlarge"]}],
    )
    # Packed afresh, its new nodes may differ: the same nodes repacking again is what counts.
    assert disruption._still_valid(repacking, command("repacking", "c", "b", "a"))
    assert not disruption._still_valid(repacking, command("repacking", "a", "b"))
    assert not disruption._still_valid(repacking, command("multi-node consolidation", "a", "b", "c"))
    # The re-check asks repacking alone (upstream's methods, tried first, could find another
    # command over some of its nodes); other commands are asked by every method, as before.
    asked = []
    real = planner.plan
    monkeypatch.setattr(planner, "plan", lambda *a, **k: asked.append(k.get("after")) or real(*a, **k))
    disruption.plan(recheck=repacking)
    disruption.plan(recheck=Disruption(reason="Underutilized", nodes=["a", "b"]))
    assert asked == [planner.SINGLE_NODE, None]


def test_a_recheck_asks_whether_these_nodes_can_still_go_not_whether_they_come_first(cluster):
    add_node("ip-a", price=0.05)
    add_node("ip-b")  # also empty: a fresh plan would now take both
    add_node("ip-busy")
    add_pod("web-0", "ip-busy")
    now = timezone.now()
    planned = Disruption.objects.create(reason="Empty", nodes=["ip-a"], nodeclaims=["claim-ip-a"])
    Disruption.objects.filter(pk=planned.pk).update(planned_at=now - timedelta(seconds=20))
    disruption.run(now)
    disruption.run(now + timedelta(seconds=6))  # upstream's minDrainTime after the taint
    planned.refresh_from_db()
    assert planned.state == Disruption.State.DONE
    assert set(ClusterNode.objects.values_list("name", flat=True)) == {"ip-b", "ip-busy"}


def test_one_disruption_round_at_a_time_whatever_the_number_of_workers(cluster):
    from provisioning import tasks

    add_node("ip-empty")
    lock = connections.get_redis().lock(tasks.DISRUPTION_LOCK, timeout=30)
    assert lock.acquire(blocking=False)  # another worker is in a round
    try:
        assert tasks.disrupt() == {"skipped": "another disruption round is running"}
        assert not Disruption.objects.exists()
    finally:
        lock.release()
    assert tasks.disrupt()["state"] == Disruption.State.PLANNED


def test_disruption_records_blocked_and_terminating_events(cluster):
    add_node("ip-kept", annotations={"karpenter.sh/do-not-disrupt": "true"})
    add_node("ip-empty")
    now = timezone.now()
    disruption.run(now)
    blocked, on_claim = cluster.events  # on the Node and on its NodeClaim, as upstream
    assert (blocked.involved.kind, blocked.involved.name) == ("Node", "ip-kept")
    assert (on_claim.involved.kind, on_claim.involved.name) == ("NodeClaim", "claim-ip-kept")
    assert (blocked.type, blocked.reason) == ("Normal", "DisruptionBlocked")
    assert blocked.message == on_claim.message == "The node has the karpenter.sh/do-not-disrupt annotation"
    cluster.events.clear()
    disruption.run(now + timedelta(seconds=16))
    terminating = [
        (e.involved.kind, e.involved.name, e.message) for e in cluster.events if e.reason == "DisruptionTerminating"
    ]
    assert terminating == [
        ("Node", "ip-empty", "Disrupting Node: Empty"),
        ("NodeClaim", "claim-ip-empty", "Disrupting NodeClaim: Empty"),
    ]


def test_consolidation_gets_what_is_left_of_the_round(settings):
    """A round aims at KARPWEB_DISRUPTION_ROUND_SECONDS: consolidation's simulations get what
    the commands carried on and the cluster's reading left of it, less the drains' half second,
    within KARPWEB_CONSOLIDATION_SECONDS, and never less than half a second (it always goes on)."""
    import time

    settings.KARPWEB_DISRUPTION_ROUND_SECONDS = 5.0
    settings.KARPWEB_CONSOLIDATION_SECONDS = 3.0
    now = time.perf_counter()
    assert disruption._consolidation_seconds(None) == 3.0
    assert disruption._consolidation_seconds(now - 0.5) == 3.0
    assert disruption._consolidation_seconds(now - 2.5) == pytest.approx(2.0, abs=0.05)
    assert disruption._consolidation_seconds(now - 10.0) == disruption.MIN_CONSOLIDATION_SECONDS == 0.5


def test_consolidation_goes_on_where_it_stopped_with_redis_or_without(settings, redis_url):
    """Where consolidation goes on next round: in Redis, for every worker; without Redis, this
    process keeps it (from the top every round, the candidates after the first a round has time
    for would never be looked at, nor repacking get its turn)."""
    from provisioning.disruption.model import Progress

    for url in (redis_url, ""):
        settings.REDIS_URL = url
        connections.reset()
        try:
            disruption._progress(Progress(single_node=7, looked=12, repacking=3, repacked=1))
            assert disruption._progress() == Progress(7, 12, 3, 1)
            disruption._progress(Progress())
            assert disruption._progress() == Progress()
        finally:
            connections.reset()


def test_a_progress_redis_holds_in_another_shape_starts_consolidation_over(settings, redis_url):
    from provisioning.disruption.model import Progress

    settings.REDIS_URL = redis_url
    connections.reset()
    try:
        for stored in ("7", '{"resume": 7}', "not json"):
            connections.get_redis().set(disruption.PROGRESS_KEY, stored)
            assert disruption._progress() == Progress()
    finally:
        connections.get_redis().delete(disruption.PROGRESS_KEY)
        connections.reset()


def test_rounds_carry_consolidations_progress_over_and_what_if_reads_it_without_moving_it(cluster, monkeypatch):
    from provisioning.disruption.model import Progress

    given = []
    real = disruption.planner.plan

    def planning(*args, **kwargs):
        given.append(kwargs.get("progress"))
        return real(*args, **kwargs)

    monkeypatch.setattr(disruption.planner, "plan", planning)
    disruption._progress(Progress(single_node=1, looked=2))
    disruption.plan()
    assert given[-1] == Progress(single_node=1, looked=2)
    after = disruption._progress()
    disruption.what_if()
    # The what-if looks at every candidate (a round that is repacking's turn would skip them),
    # from where the next round goes on, and leaves the progress as it was.
    assert given[-1] == Progress(single_node=after.single_node)
    assert disruption._progress() == after


def test_nodes_are_priced_with_the_nodeoverlays_in_force(cluster):
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "agreed-price"},
        "spec": {
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}],
            "price": "0.05",
        },
    }
    add_node("ip-listed")  # launched at list price, before the overlay
    apply_manifest(overlay, source="cli")
    planned = disruption.run(timezone.now())
    assert planned.reason == "Empty" and float(planned.savings_per_hour) == pytest.approx(0.05)


def test_a_node_an_overlay_no_longer_prices_costs_its_list_price_again(cluster):
    add_node("ip-discounted", price=0.1)
    NodeClaim.objects.filter(name="claim-ip-discounted").update(list_price_per_hour=0.192)
    planned = disruption.run(timezone.now())
    assert planned.reason == "Empty" and float(planned.savings_per_hour) == pytest.approx(0.192)


def test_a_drain_past_its_share_of_the_round_leaves_the_other_nodes_for_the_next(cluster, settings):
    """Drains come last in a round, with what is left of KARPWEB_DISRUPTION_ROUND_SECONDS (at
    least a second): nodes a drain has not begun by then wait, said on the command, and go in
    a later round."""
    every_node = {**CONSOLIDATE_AT_ONCE, "budgets": [{"nodes": "100%"}]}
    on_demand = requirement("karpenter.sh/capacity-type", "on-demand")
    apply_manifest(nodepool(on_demand, disruption=every_node), source="cli")
    add_node("ip-a")
    add_node("ip-b")
    now = timezone.now()
    planned = disruption.run(now)
    assert planned.reason == "Empty" and sorted(planned.nodes) == ["ip-a", "ip-b"]
    saved = disruption.MIN_DRAIN_SECONDS
    disruption.MIN_DRAIN_SECONDS = -1000.0  # this round's time for drains is used up before they begin
    settings.KARPWEB_DISRUPTION_ROUND_SECONDS = -1000.0
    try:
        disruption.run(now + timedelta(seconds=20))
    finally:
        disruption.MIN_DRAIN_SECONDS = saved
        settings.KARPWEB_DISRUPTION_ROUND_SECONDS = 4.0
    planned.refresh_from_db()
    assert planned.state == Disruption.State.DRAINING
    assert "ip-a: drained next round (this round's time for drains is used up)" in planned.message
    assert ClusterNode.objects.filter(name__in=["ip-a", "ip-b"]).count() == 2
    disruption.run(now + timedelta(seconds=30))
    disruption.run(now + timedelta(seconds=40))
    planned.refresh_from_db()
    assert planned.state == Disruption.State.DONE
    assert not ClusterNode.objects.filter(name__in=["ip-a", "ip-b"]).exists()


def _one_empty_node_planned_then_another(now) -> Disruption:
    """Under a budget that allows every node: ip-a empty and planned at ``now``; then ip-b empty too."""
    every_node = {**CONSOLIDATE_AT_ONCE, "budgets": [{"nodes": "100%"}]}
    on_demand = requirement("karpenter.sh/capacity-type", "on-demand")
    apply_manifest(nodepool(on_demand, disruption=every_node), source="cli")
    add_node("ip-a")
    first = disruption.run(now)
    assert first.reason == "Empty" and first.nodes == ["ip-a"]
    add_node("ip-b")
    return first


def test_a_round_whose_rechecks_took_half_its_time_leaves_planning_to_the_next(cluster, settings):
    now = timezone.now()
    first = _one_empty_node_planned_then_another(now)
    settings.KARPWEB_DISRUPTION_ROUND_SECONDS = 0.0  # any re-check takes more than half of it
    disruption.run(now + timedelta(seconds=16))
    first.refresh_from_db()
    assert first.state == Disruption.State.DRAINING  # re-checked and started, as ever
    assert list(Disruption.objects.values_list("nodes", flat=True)) == [["ip-a"]]  # nothing planned
    disruption.run(now + timedelta(seconds=32))  # no re-check due: this round plans
    assert Disruption.objects.filter(nodes=["ip-b"], reason="Empty").exists()


def test_a_command_not_yet_due_for_its_recheck_does_not_hold_planning_up(cluster, settings):
    now = timezone.now()
    _one_empty_node_planned_then_another(now)
    settings.KARPWEB_DISRUPTION_ROUND_SECONDS = 0.0
    disruption.run(now + timedelta(seconds=5))  # the first command waits for its re-check
    assert sorted(Disruption.objects.values_list("nodes", flat=True)) == [["ip-a"], ["ip-b"]]


def test_a_drain_over_several_rounds_says_it_is_terminating_the_node_once(cluster):
    """The node is tainted, cordoned and announced (DisruptionTerminating) when its drain begins,
    not again every round it waits (here for a do-not-disrupt pod until the grace period)."""
    grace = {**CONSOLIDATE_AT_ONCE, "budgets": [{"nodes": "100%"}]}
    pool = nodepool(requirement("karpenter.sh/capacity-type", "on-demand"), disruption=grace)
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "1m"
    pool["spec"]["template"]["spec"]["expireAfter"] = "1h"
    apply_manifest(pool, source="cli")
    add_node("ip-old")
    add_pod("keep", "ip-old", annotations={"karpenter.sh/do-not-disrupt": "true"})
    now = timezone.now()
    for seconds in range(0, 100, 10):
        disruption.run(now + timedelta(seconds=seconds))
    terminating = [(e.involved.kind, e.involved.name) for e in cluster.events if e.reason == "DisruptionTerminating"]
    assert terminating == [("Node", "ip-old"), ("NodeClaim", "claim-ip-old")]
    assert not ClusterNode.objects.filter(name="ip-old").exists()  # gone once the grace period passed
