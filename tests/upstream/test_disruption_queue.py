"""Upstream's orchestration queue tests (``pkg/controllers/disruption/queue_test.go``), ported.

Upstream's queue takes a started command (``StartCommand``: taint the candidates, create the
replacement NodeClaims), then on each of its reconciles waits for the replacements to
initialize, deletes the candidates' NodeClaims once they have, and gives up after a timeout
that grows with the queue (``GetMaxRetryDuration``), untainting the candidates. karpweb's queue
is the ``Disruption`` rows of ``services.disruption`` (``disruption_env.py``):

* ``queue.StartCommand`` with a hand-built Drift command is the real round's own Drifted
  command, started: a node whose NodeClaim records a stale NodePool hash (upstream's
  ``Drifted`` condition) is planned in one round and re-checked and started 15 s later
  (``start``): the command is then ``replacing``, its nodes tainted, its replacement
  NodeClaims created. A command with replacements needs pods to replace: the drifted nodes
  carry a small pod each (upstream's hand-built commands have replacements without pods),
  and the NodePool's consolidateAfter is Never, so only drift acts;
* ``ExpectObjectReconciled(queue, nodeClaim)`` is ``services.disruption.advance`` of the
  command naming that node; ``queue.HasAny`` is a command in progress naming it;
  ``cmd.Replacements[i].Initialized`` is the replacement NodeClaim's state as the command
  has seen it: a command that has seen every replacement initialized has moved on to
  ``draining``;
* ``ExpectNodeClaimDeployedAndStateUpdated`` is ``deploy`` (the claim launched, its Node
  registered, not initialized); ``ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated`` is
  ``initialize``;
* upstream's queue deletes the candidates' NodeClaims and its termination controller drains
  and deletes them (``ExpectNodeClaimsCascadeDeletion``); here the command drains and
  terminates its nodes itself (``finish``: its later steps, 16 s apart, as upstream's
  terminator waits its minimum drain time). ``ExpectNotFound`` of a NodeClaim is its row
  terminated (karpweb keeps the rows), of a Node its row gone;
* upstream's recorder is ``env.cluster.events`` (the Launching, WaitingOnReadiness and
  Terminating events are worded as upstream's).

The CalculateRetryDuration table asks ``GetMaxRetryDuration`` for queues of 100 to 100000
commands; karpweb's is ``services.disruption.command_timeout`` of the number of nodes waiting
for replacements, as upstream's queue holds one entry per candidate node.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from disruption_env import DisruptionEnv, name, node_pool
from django.utils import timezone

from provisioning.cluster.simulated import node_manifest
from provisioning.models import ClusterNode, Disruption, NodeClaim
from provisioning.services import disruption as service

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/disruption/queue_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

NODE_TYPE = "m5.xlarge"  # upstream's InstanceTypes[0] at its cheapest offering (us-east-1a, on demand)
APP = {"app": "queue-test"}


@pytest.fixture
def env(disruption_env: DisruptionEnv) -> DisruptionEnv:
    """The BeforeEach: a NodePool (consolidateAfter Never here: only the drift the test sets up acts)."""
    disruption_env.apply(node_pool(consolidate_after="Never"))
    return disruption_env


# ------------------------------------------------------------------ helpers


def drifted_node(env: DisruptionEnv, *, pods: int = 1, cpu: str = "100m") -> str:
    """``test.NodeClaimAndNode`` made initialized, its NodeClaim drifted (a stale NodePool
    hash), carrying ``pods`` pods of ``cpu`` that its replacement takes."""
    node = env.node(instance_type=NODE_TYPE)
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "driftHashes": {**claim.spec["driftHashes"], "nodepool": "stale"}}
    claim.save(update_fields=["spec"])
    for _ in range(pods):
        env.pod(node=node, cpu=cpu, labels=APP)
    return node


def start(env: DisruptionEnv) -> Disruption:
    """``queue.StartCommand``: the round plans the Drifted command, the round 15 s later
    re-checks and starts it (taint, replacements). Returns the command started."""
    service.run(env.now)
    (planned,) = env.disruptions(Disruption.State.PLANNED)
    env.advance(16)
    service.run(env.now)
    planned.refresh_from_db()
    assert planned.state == Disruption.State.REPLACING, planned.message
    return planned


def command_of(node: str) -> Disruption:
    (command,) = [d for d in env_disruptions() if node in d.nodes]
    return command


def env_disruptions() -> list[Disruption]:
    return list(Disruption.objects.order_by("planned_at", "pk"))


def reconcile(env: DisruptionEnv, command: Disruption) -> Disruption:
    """``ExpectObjectReconciled(queue, candidate NodeClaim)``: the command's next step now."""
    command.refresh_from_db()
    service.advance(command, env.now)
    command.refresh_from_db()
    return command


def finish(env: DisruptionEnv, command: Disruption, max_rounds: int = 10) -> Disruption:
    """The drain and termination that follow (upstream's termination controller,
    ``ExpectNodeClaimsCascadeDeletion``): the command's steps, 16 s apart, until it is done."""
    for _ in range(max_rounds):
        if command.state not in service.ACTIVE:
            break
        env.advance(16)
        reconcile(env, command)
    return command


def replacements_of(command: Disruption) -> list[NodeClaim]:
    return list(NodeClaim.objects.filter(disruption=command).order_by("pk"))


def deploy(env: DisruptionEnv, claim: NodeClaim) -> str:
    """``ExpectNodeClaimDeployedAndStateUpdated``: the claim is launched at its first offering
    and its Node registers; it is not initialized. Returns the Node's name."""
    option = claim.launch_options[0]
    assert claim.move(
        NodeClaim.State.PENDING,
        NodeClaim.State.LAUNCHED,
        instance_id=f"i-{name('replacement').replace('-', '')}",
        instance_type=option["instanceType"],
        zone=option["zone"],
        capacity_type=option["capacityType"],
        price_per_hour=option["price"],
        launched_at=timezone.now(),
    )
    node_name = f"{claim.name}-node"
    it = env.catalog.instance_type(claim.instance_type)
    labels = {**claim.node_labels(), "karpenter.sh/registered": "true"}
    manifest = node_manifest(
        node_name,
        it,
        zone=claim.zone,
        capacity_type=claim.capacity_type,
        nodepool=claim.nodepool_name,
        labels=labels,
        taints=claim.spec.get("taints") or (),
    )
    ClusterNode.objects.create(
        name=node_name,
        manifest=manifest,
        nodeclaim=claim.name,
        nodepool=claim.nodepool_name,
        instance_id=claim.instance_id,
        ready=True,
        last_pod_change_at=env.now,
    )
    assert claim.move(NodeClaim.State.LAUNCHED, NodeClaim.State.REGISTERED, node_name=node_name, registered_at=env.now)
    return node_name


def initialize(env: DisruptionEnv, claim: NodeClaim) -> None:
    """``ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated`` of a deployed replacement."""
    assert claim.move(NodeClaim.State.REGISTERED, NodeClaim.State.INITIALIZED, initialized_at=env.now)
    node = ClusterNode.objects.get(name=claim.node_name)
    node.manifest["metadata"]["labels"]["karpenter.sh/initialized"] = "true"
    node.save(update_fields=["manifest"])


def live_claims() -> list[NodeClaim]:
    """``ExpectNodeClaims``: the NodeClaims that exist (karpweb keeps terminated rows)."""
    return list(NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES))


def expect_gone(env: DisruptionEnv, node: str, claim: str) -> None:
    """``ExpectNotFound(nodeClaim, node)``."""
    assert node not in env.node_names()
    assert NodeClaim.objects.get(name=claim).state == NodeClaim.State.TERMINATED


def detected(env: DisruptionEnv, reason: str, message: str, involved: str | None = None) -> bool:
    """``recorder.DetectedEvent(message)``: an event of ``reason`` saying ``message`` was
    recorded (about ``involved``, when given)."""
    return any(
        e.reason == reason and e.message == message and involved in (None, e.involved.name) for e in env.cluster.events
    )


def claim_of(node: str) -> str:
    return ClusterNode.objects.get(name=node).nodeclaim


# ------------------------------------------------------------------ Reconcile


def test_should_keep_nodes_tainted_when_replacements_haven_t_finished_initialization(env):
    """Queue / Reconcile / should keep nodes tainted when replacements haven't finished initialization"""
    node = drifted_node(env)
    command = start(env)
    assert env.tainted(node)
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING
    assert len(live_claims()) == 2
    assert env.tainted(node)


def test_should_not_return_an_error_when_handling_commands_before_the_timeout(env):
    """Queue / Reconcile / should not return an error when handling commands before the timeout

    The replacement has not launched: a reconcile right after the start keeps the command in
    the queue, and so does one 9 minutes later (the timeout is 10 minutes for a queue this
    short)."""
    node = drifted_node(env)
    command = start(env)
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING, command.message
    assert command_of(node).pk == command.pk
    env.advance(9 * 60)
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING, command.message


def test_should_not_return_an_error_when_the_nodeclaim_doesn_t_exist_but_the_nodecliam_is_in_cluster_state(env):
    """Queue / Reconcile / should not return an error when the NodeClaim doesn't exist but the NodeCliam is in cluster state

    Upstream's replacement may be missing from the API server's reads while its cluster state
    has it, and must not count as deleted. karpweb reads NodeClaims from one store, its rows,
    so there is no such lag; the port keeps upstream's body: the replacement is deployed
    (launched, its Node registered, not initialized), and the queue keeps the command."""
    node = drifted_node(env)
    command = start(env)
    (replacement,) = replacements_of(command)
    deploy(env, replacement)
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING, command.message
    assert command_of(node).state in service.ACTIVE


def test_should_untaint_nodes_when_a_command_times_out(env):
    """Queue / Reconcile / should untaint nodes when a command times out

    (Upstream's nodes are created tainted; here the start taints them.)"""
    node = drifted_node(env)
    command = start(env)
    assert env.tainted(node)
    env.advance(11 * 60)
    reconcile(env, command)
    assert command.state == Disruption.State.CANCELLED
    assert node in env.node_names()
    assert not env.tainted(node)


def test_should_fully_handle_a_command_when_replacements_are_initialized(env):
    """Queue / Reconcile / should fully handle a command when replacements are initialized"""
    node = drifted_node(env)
    claim = claim_of(node)
    command = start(env)
    (replacement,) = replacements_of(command)
    deploy(env, replacement)
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING  # Replacements[0].Initialized is false
    assert detected(env, "DisruptionLaunching", "Launching NodeClaim: Drifted", replacement.name)
    assert detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", replacement.name)

    initialize(env, replacement)
    reconcile(env, command)
    assert command.state in (Disruption.State.DRAINING, Disruption.State.DONE)  # Initialized is true
    assert detected(env, "DisruptionTerminating", "Disrupting Node: Drifted", node)
    assert detected(env, "DisruptionTerminating", "Disrupting NodeClaim: Drifted", claim)

    finish(env, command)
    expect_gone(env, node, claim)


def test_should_only_finish_a_command_when_all_replacements_are_initialized(env):
    """Queue / Reconcile / should only finish a command when all replacements are initialized

    Two replacements: the NodePool offers only m5.large (2 vCPUs), and the drifted node's two
    1.5-cpu pods fit one to an m5.large."""
    env.apply(
        node_pool(
            consolidate_after="Never",
            requirements=[
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        )
    )
    node = drifted_node(env, pods=2, cpu="1.5")
    claim = claim_of(node)
    command = start(env)
    first, second = replacements_of(command)
    deploy(env, first)
    deploy(env, second)

    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING  # neither initialized
    assert detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption")

    initialize(env, first)
    env.cluster.events.clear()
    reconcile(env, command)
    assert command.state == Disruption.State.REPLACING  # the first initialized, the second not
    assert detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", second.name)
    assert not detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", first.name)
    assert node in env.node_names() and env.tainted(node)

    initialize(env, second)
    reconcile(env, command)
    assert command.state in (Disruption.State.DRAINING, Disruption.State.DONE)  # both initialized

    finish(env, command)
    expect_gone(env, node, claim)


def test_should_not_wait_for_replacements_when_none_are_needed(env):
    """Queue / Reconcile / should not wait for replacements when none are needed

    The drifted node is empty: its Drifted command has no replacement."""
    node = drifted_node(env, pods=0)
    claim = claim_of(node)
    service.run(env.now)
    (command,) = env.disruptions()
    assert command.replacement_plan == []
    env.advance(16)
    reconcile(env, command)  # the re-check starts it: there is nothing to wait for
    assert command.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    assert detected(env, "DisruptionTerminating", "Disrupting Node: Drifted", node)
    assert detected(env, "DisruptionTerminating", "Disrupting NodeClaim: Drifted", claim)

    finish(env, command)
    assert command.state == Disruption.State.DONE
    expect_gone(env, node, claim)


def test_should_finish_two_commands_in_order_as_replacements_are_initialized(env):
    """Queue / Reconcile / should finish two commands in order as replacements are initialized

    Drift replaces one node a round: the first command is planned, then started in the round
    that plans the second, which starts a round later. Each node's 3-cpu pod does not fit
    beside the other's (m5.xlarge: 3.92 cpu allocatable), so each needs its replacement."""
    node1, node2 = drifted_node(env, cpu="3"), drifted_node(env, cpu="3")
    claim1, claim2 = claim_of(node1), claim_of(node2)
    service.run(env.now)
    env.advance(16)
    service.run(env.now)
    env.advance(16)
    service.run(env.now)
    cmd1, cmd2 = command_of(node1), command_of(node2)
    assert cmd1.pk != cmd2.pk
    assert (cmd1.state, cmd2.state) == (Disruption.State.REPLACING, Disruption.State.REPLACING)
    (replacement1,) = replacements_of(cmd1)
    (replacement2,) = replacements_of(cmd2)
    deploy(env, replacement1)
    deploy(env, replacement2)

    # Reconcile the first command: nothing is initialized.
    env.cluster.events.clear()
    reconcile(env, cmd1)
    assert cmd1.state == Disruption.State.REPLACING
    assert detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", replacement1.name)
    reconcile(env, cmd2)
    assert cmd2.state == Disruption.State.REPLACING
    assert detected(env, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption", replacement2.name)

    # The first command's replacement initializes; reconciling the second changes neither.
    initialize(env, replacement1)
    reconcile(env, cmd2)
    cmd1.refresh_from_db()
    assert (cmd1.state, cmd2.state) == (Disruption.State.REPLACING, Disruption.State.REPLACING)

    # Reconciling the first sees its replacement initialized.
    reconcile(env, cmd1)
    cmd2.refresh_from_db()
    assert cmd1.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    assert cmd2.state == Disruption.State.REPLACING
    finish(env, cmd1)
    expect_gone(env, node1, claim1)

    # Then the second.
    initialize(env, replacement2)
    reconcile(env, cmd2)
    cmd1.refresh_from_db()
    assert cmd1.state == Disruption.State.DONE
    assert cmd2.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    finish(env, cmd2)
    expect_gone(env, node2, claim2)


# ------------------------------------------------------------------ CalculateRetryDuration


def expect_timeout(commands: int, expected: timedelta) -> None:
    assert service.command_timeout(commands) == expected


def test_should_calculate_correct_timeout_based_on_queue_length_very_small_queue_100_commands():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / very small queue - 100 commands"""
    expect_timeout(100, timedelta(minutes=10))


def test_should_calculate_correct_timeout_based_on_queue_length_small_queue_4000_commands():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / small queue - 4000 commands"""
    expect_timeout(4000, timedelta(minutes=10))


def test_should_calculate_correct_timeout_based_on_queue_length_medium_queue_10000_commands():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / medium queue - 10000 commands"""
    expect_timeout(10000, timedelta(minutes=13, seconds=20))


def test_should_calculate_correct_timeout_based_on_queue_length_large_queue_40000_commands():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / large queue - 40000 commands"""
    expect_timeout(40000, timedelta(minutes=53, seconds=20))


def test_should_calculate_correct_timeout_based_on_queue_length_very_large_queue_80000_commands_capped():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / very large queue - 80000 commands (capped)"""
    expect_timeout(80000, timedelta(hours=1))


def test_should_calculate_correct_timeout_based_on_queue_length_extremely_large_queue_100000_commands_capped():
    """Queue / Reconcile / CalculateRetryDuration / should calculate correct timeout based on queue length / extremely large queue - 100000 commands (capped)"""
    expect_timeout(100000, timedelta(hours=1))
