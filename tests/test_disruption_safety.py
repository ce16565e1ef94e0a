"""The disruption round as a cluster feels it: a node being disrupted takes no pods, the drain
keeps to PodDisruptionBudgets, do-not-disrupt and upstream's order, the grace period counts
from the drain, drift follows upstream's hash rules, pending pods keep their room."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "upstream"))

from disruption_env import DO_NOT_DISRUPT, ZONE_1, DisruptionEnv, node_pool  # noqa: E402
from disruption_env import disruption_env as _env_fixture  # noqa: E402

from provisioning.disruption import drain  # noqa: E402
from provisioning.models import ClusterNode, ClusterPod, Disruption, NodeClaim  # noqa: E402
from provisioning.services.provision import cluster_documents  # noqa: E402
from provisioning.services.simulate import build_snapshot  # noqa: E402

ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}


env = pytest.fixture(_env_fixture.__wrapped__, name="env")  # the upstream ports' environment


def underutilized(env: DisruptionEnv, **pool) -> tuple[str, list[str]]:
    """A dear node with one small pod: consolidation replaces it with a cheaper one."""
    env.apply(node_pool(requirements=[ON_DEMAND], **pool))
    node = env.node(instance_type="m5.4xlarge")
    pods = env.pods(1, node=node, labels={"app": "web"})
    return node, pods


# ------------------------------------------------------------------ a disrupting node takes no pods


def test_a_node_is_tainted_before_its_replacement_launches(env):
    node, _ = underutilized(env)
    env.step()  # planned
    env.step()  # re-checked: replacing
    (command,) = env.disruptions()
    assert command.state == Disruption.State.REPLACING
    assert env.tainted(node)


def test_the_provisioner_and_the_scheduler_put_nothing_on_a_disrupting_node(env):
    node, pods = underutilized(env)
    env.step()
    disruption_started = env.step()
    assert disruption_started is not None and env.tainted(node)
    from provisioning.services.catalog import load_catalog

    snapshot, _ = build_snapshot(cluster_documents(load_catalog())[0])
    assert node not in {n.name for n in snapshot.nodes}
    assert set(pods) <= {p.key for p in snapshot.pods}  # planned elsewhere, as pending
    pending = env.pod()
    from provisioning.cluster import simulated
    from provisioning.services.simulate import default_solver

    simulated.bind_pending(default_solver())
    assert env.node_of(pending) != node


def test_a_failed_replacement_gives_the_node_back(env):
    node, _ = underutilized(env)
    env.step()
    from provisioning.services import disruption as service

    service.run(env.now)  # re-checked: replacing, the replacement not launched yet
    (replacement,) = env.replacements()
    replacement.move(NodeClaim.State.PENDING, NodeClaim.State.FAILED, reason="InsufficientCapacity")
    service.run(env.now + timedelta(seconds=5))
    command = env.disruptions()[0]
    assert command.state == Disruption.State.CANCELLED and "schedulable again" in command.message
    assert not env.tainted(node)
    manifest = ClusterNode.objects.get(name=node).manifest
    assert not manifest["spec"].get("unschedulable")


# ------------------------------------------------------------------ the drain


def test_the_drain_waits_for_a_do_not_disrupt_pod_and_a_pdb(env):
    env.apply(node_pool(requirements=[ON_DEMAND], expire_after="1h"))
    node = env.node(age=timedelta(hours=2))
    kept = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"})
    guarded = env.pods(2, node=node, labels={"app": "db"})
    env.pdb(labels={"app": "db"}, min_available=2)
    env.step()  # expired: drained at once
    (command,) = env.disruptions()
    assert command.reason == "Expired" and command.state == Disruption.State.DRAINING
    assert env.cluster.evictions == [] and set(env.cluster.refused) == set(guarded)
    assert kept not in env.cluster.refused  # never asked: the drain waits for it
    assert "refused by a PodDisruptionBudget" in command.message and DO_NOT_DISRUPT in command.message
    for _ in range(3):
        env.step(60)
    command.refresh_from_db()
    assert command.state == Disruption.State.DRAINING  # no terminationGracePeriod: it waits
    assert env.node_of(kept) == node and all(env.node_of(p) == node for p in guarded)


def test_the_grace_period_counts_from_the_drain_and_then_deletes(env):
    env.apply(node_pool(requirements=[ON_DEMAND], termination_grace_period="2m"))
    node = env.node(instance_type="m5.4xlarge")
    kept = env.pod(node=node, annotations={DO_NOT_DISRUPT: "true"}, grace_seconds=30)
    # Drifted: with a terminationGracePeriod, a do-not-disrupt pod does not keep it.
    env.apply(node_pool(requirements=[ON_DEMAND], termination_grace_period="2m", labels={"team": "a"}))
    env.step(60)  # planned; a minute passes before the re-check
    env.step(0)  # re-checked: replacement launched (and registered by the harness)
    env.step(0)  # replacement initialized: the drain begins now
    (command,) = env.disruptions()  # the replacement is not consolidated while it takes the drained pods
    assert command.state == Disruption.State.DRAINING
    began = command.drain_started_at
    assert began is not None and (began - command.planned_at).total_seconds() >= 60
    env.advance(60)  # 60 s into the drain; 2m - 30 s of the pod's own grace not reached
    env.step(0)
    assert env.node_of(kept) == node and env.cluster.deleted_pods == []
    env.advance(31)  # 91 s in: past 120 - 30
    env.step(0)
    assert env.cluster.deleted_pods == [kept]
    command.refresh_from_db()
    assert "deleted: the terminationGracePeriod has passed" in command.message


def test_a_round_of_the_drain_evicts_one_group_critical_and_daemonset_pods_last():
    def manifest(name, *, critical=False, daemon=False, **extra):
        meta = {"name": name, "namespace": "default"}
        if daemon:
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": True}
            ]
        spec = {"containers": [{"name": "c", "image": "i"}]}
        if critical:
            spec["priorityClassName"] = "system-node-critical"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, **extra}

    pods = [
        manifest("app"),
        manifest("agent", daemon=True),
        manifest("dns", critical=True),
        manifest("cni", critical=True, daemon=True),
        manifest("done", status={"phase": "Succeeded"}),
    ]
    order = []
    while True:
        step = drain.next_step(pods, 0.0, None)
        if step.drained:
            break
        order.append(sorted(p.name for p in step.evict))
        pods = [p for p in pods if p["metadata"]["name"] not in {e.name for e in step.evict}]
    assert order == [["app"], ["agent"], ["dns"], ["cni"]]  # the finished pod is not waited for


def test_static_pods_and_pods_tolerating_the_disrupted_taint_are_left_alone():
    static = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "kube-proxy",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "controller": True}],
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    tolerant = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "logger"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": [{"operator": "Exists"}]},
    }
    assert drain.next_step([static, tolerant], 0.0, None).drained


# ------------------------------------------------------------------ what blocks a node


@pytest.mark.parametrize("where", ["claim", "nodepool"])
def test_do_not_disrupt_on_the_nodeclaim_or_the_nodepool_template_blocks(env, where):
    annotations = {DO_NOT_DISRUPT: "true"}
    env.apply(node_pool(requirements=[ON_DEMAND], annotations=annotations if where == "nodepool" else None))
    node = env.node(claim_annotations=annotations if where == "claim" else None)
    result = env.plan()
    assert not result.commands
    assert DO_NOT_DISRUPT in result.not_candidates[node]


def test_a_do_not_disrupt_duration_blocks_until_it_has_elapsed(env):
    env.apply(node_pool(requirements=[ON_DEMAND]))
    young = env.node(annotations={DO_NOT_DISRUPT: "2h"}, age=timedelta(hours=1))
    old = env.node(annotations={DO_NOT_DISRUPT: "30m"}, age=timedelta(hours=1))
    result = env.plan()
    assert "not yet elapsed" in result.not_candidates[young]
    assert [c.candidates for c in result.commands] == [(old,)]


def test_a_pod_selected_by_two_pdbs_blocks_its_node_and_a_null_selector_selects_nothing(env):
    env.apply(node_pool(requirements=[ON_DEMAND]))
    node = env.node(instance_type="m5.4xlarge")
    env.pod(node=node, labels={"app": "web"})
    env.pdb("a", labels={"app": "web"}, max_unavailable=1)
    env.pdb("b", labels={"app": "web"}, max_unavailable=1)
    other = env.node(instance_type="m5.4xlarge")
    env.pod(node=other, labels={"app": "api"})
    env.pdb("nothing", labels=None, max_unavailable=0)
    result = env.plan()
    assert "2 PodDisruptionBudgets (default/a, default/b)" in result.not_candidates[node]
    assert other in {n for c in result.commands for n in c.candidates}


# ------------------------------------------------------------------ budgets, expiry, rounds


def test_expiry_uses_the_claims_own_expire_after(env):
    env.apply(node_pool(requirements=[ON_DEMAND], expire_after="720h"))
    node = env.node(age=timedelta(hours=3))
    env.pod(node=node)
    env.apply(node_pool(requirements=[ON_DEMAND], expire_after="1h"))  # shortened later
    result = env.plan()
    assert not [c for c in result.commands if c.reason == "Expired"]
    short = env.node(age=timedelta(hours=3))  # launched under 1h
    result = env.plan()
    assert [c.candidates for c in result.commands if c.reason == "Expired"] == [(short,)]


def test_an_expiring_node_does_not_hold_consolidation_up(env):
    env.apply(node_pool(requirements=[ON_DEMAND], expire_after="1h"))
    expired_node = env.node(age=timedelta(hours=2), instance_type="m5.large")
    env.pod(node=expired_node, annotations={DO_NOT_DISRUPT: "true"})  # its drain waits
    env.step()
    empty = env.node(age=timedelta(minutes=10))
    env.step()
    reasons = {d.reason: d.nodes for d in env.disruptions()}
    assert reasons == {"Expired": [expired_node], "Empty": [empty]}


def test_budgets_count_not_ready_nodes_and_not_uninitialized_ones(env):
    env.apply(node_pool(requirements=[ON_DEMAND], budgets=[{"nodes": "1"}]))
    not_ready = env.node(ready=False)
    empty = env.node()
    result = env.plan()
    assert not result.commands
    assert "budget" in result.not_candidates[empty]
    # Once the NotReady node is gone, a node still initializing that is being disrupted uses
    # up nothing: only initialized nodes count, as upstream's BuildDisruptionBudgetMapping.
    ClusterNode.objects.filter(name=not_ready).delete()
    starting = env.node(initialized=False)
    Disruption.objects.create(reason="Underutilized", nodes=[starting], state=Disruption.State.REPLACING)
    result = env.plan()
    assert [c.candidates for c in result.commands] == [(empty,)]


# ------------------------------------------------------------------ drift


def test_broadening_a_requirement_or_reordering_a_list_drifts_nothing(env):
    zones = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE_1, "us-east-1b"]}
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
    env.apply(node_pool(requirements=[ON_DEMAND, zones], taints=taints))
    node = env.node(taints=taints)
    env.pod(node=node, tolerations=[{"operator": "Exists"}])
    wider = dict(zones, values=[ZONE_1, "us-east-1b", "us-east-1c"])
    env.apply(node_pool(requirements=[wider, ON_DEMAND], taints=taints[::-1]))
    assert not [c for c in env.plan().commands if c.reason == "Drifted"]


def test_narrowing_a_requirement_drifts_only_the_nodes_outside_it(env):
    env.apply(node_pool(requirements=[ON_DEMAND], consolidation_policy="WhenEmpty"))
    inside = env.node(zone=ZONE_1)
    outside = env.node(zone="us-east-1b")
    for node in (inside, outside):
        env.pod(node=node)
    only_a = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE_1]}
    env.apply(node_pool(requirements=[ON_DEMAND, only_a], consolidation_policy="WhenEmpty"))
    result = env.plan()
    assert [c.candidates for c in result.commands if c.reason == "Drifted"] == [(outside,)]
    assert "RequirementsDrifted" in next(c for c in result.commands).explanation


def test_a_changed_label_in_the_template_drifts_every_node_of_the_pool(env):
    env.apply(node_pool(requirements=[ON_DEMAND]))
    node = env.node()
    env.pod(node=node)
    env.apply(node_pool(requirements=[ON_DEMAND], labels={"team": "a"}))
    result = env.plan()
    assert [c.reason for c in result.commands] == ["Drifted"]
    assert "NodePoolDrifted" in result.commands[0].explanation


# ------------------------------------------------------------------ pending pods


def test_consolidation_keeps_the_room_pending_pods_need(env):
    one_type = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}
    env.apply(node_pool(requirements=[ON_DEMAND, one_type]))
    busy = env.node(instance_type="m5.xlarge")
    env.pod(node=busy, cpu="3", memory="4Gi")
    spare = env.node(instance_type="m5.xlarge")
    env.pod(node=spare, cpu="500m", memory="1Gi")
    # The spare node's pod fits beside the busy one, so the spare node can go; but a pending
    # pod is about to take its room, and without it that pod would need a new node.
    pending = env.pod(cpu="3", memory="8Gi")
    result = env.plan()
    assert result.commands == ()
    assert "no cheaper replacement" in result.not_candidates[spare]  # the pending pod needs the new node
    ClusterPod.objects.filter(name=pending.split("/")[1]).delete()
    result = env.plan()
    (command,) = result.commands
    assert (command.reason, command.decision) == ("Underutilized", "delete")
    assert command.candidates in ((spare,), (busy,))  # either node's pod fits beside the other's


def test_a_node_whose_ami_the_nodeclass_no_longer_selects_has_drifted(env):
    from provisioning.models import EC2NodeClass

    env.apply(node_pool(requirements=[ON_DEMAND], consolidation_policy="WhenEmpty"))
    launched = {"imageId": "ami-old", "subnetId": "subnet-a", "securityGroupIds": ["sg-1"]}
    current = env.node(claim_spec={"launched": dict(launched, imageId="ami-new")})
    old = env.node(claim_spec={"launched": launched})
    for node in (current, old):
        env.pod(node=node)
    EC2NodeClass.objects.filter(name="default").update(
        status={
            "amis": [{"id": "ami-new"}],
            "subnets": [{"id": "subnet-a", "zone": ZONE_1}],
            "securityGroups": [{"id": "sg-1"}],
        }
    )
    result = env.plan()
    (command,) = result.commands
    assert command.reason == "Drifted" and command.candidates == (old,)
    assert "AMIDrift" in command.explanation


def test_resolved_drift_compares_subnets_and_security_groups_as_sets():
    from provisioning.disruption import drift

    status = {"amis": [{"id": "ami-1"}], "subnets": [{"id": "s-1"}], "securityGroups": [{"id": "g-1"}, {"id": "g-2"}]}
    same = {"imageId": "ami-1", "subnetId": "s-1", "securityGroupIds": ["g-2", "g-1"]}
    assert drift.resolved_drift(same, status) is None
    assert drift.resolved_drift({"subnetId": "s-2"}, status) == drift.SUBNET_DRIFTED
    assert drift.resolved_drift({"securityGroupIds": ["g-1"]}, status) == drift.SECURITY_GROUP_DRIFTED
    assert drift.resolved_drift({}, status) is None  # nothing known of the launch: nothing compared


def test_drift_reasons_come_in_upstreams_order():
    """The NodePool's hash, its requirements, then the provider's: the EC2NodeClass's hash, the
    AMI, the security groups, the subnet (upstream's core, then its AWS IsDrifted)."""
    from provisioning.disruption import drift

    template = {"spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}
    spec = {"role": "r", "userData": "a"}
    recorded = drift.hashes(template, spec)
    status = {"amis": [{"id": "ami-1"}], "subnets": [{"id": "s-1"}], "securityGroups": [{"id": "g-1"}]}
    wrong = {"imageId": "ami-2", "subnetId": "s-2", "securityGroupIds": ["g-2"]}
    labels = {"karpenter.sh/capacity-type": "on-demand"}

    def reason(**changes):
        facts = dict(labels=labels, recorded=recorded, template=template, nodeclass_spec=spec, nodeclass_status=status,
                     launched=wrong)
        return drift.drift_reason(**{**facts, **changes})

    stale = {**recorded, "nodepool": "stale", "nodeclass": "stale"}
    assert reason(recorded=stale) == drift.NODEPOOL_DRIFTED
    assert reason(recorded={**recorded, "nodeclass": "stale"}) == drift.REQUIREMENTS_DRIFTED
    spot = {"karpenter.sh/capacity-type": "spot"}
    assert reason(labels=spot, recorded={**recorded, "nodeclass": "stale"}) == drift.NODECLASS_DRIFTED
    assert reason(labels=spot) == drift.AMI_DRIFTED
    assert reason(labels=spot, launched={**wrong, "imageId": "ami-1"}) == drift.SECURITY_GROUP_DRIFTED
    right_groups = {**wrong, "imageId": "ami-1", "securityGroupIds": ["g-1"]}
    assert reason(labels=spot, launched=right_groups) == drift.SUBNET_DRIFTED
