"""Interruptions: what AWS says about the instances, acted on as upstream's interruption
controller acts (``aws/karpenter-provider-aws`` ``pkg/controllers/interruption``).

Two sources feed the same handling:

* the interruption queue (``KARPWEB_INTERRUPTION_QUEUE``, SQS fed by five EventBridge rules),
  long-polled by one consumer per deployment (``manage.py interruptions``): a message is
  deleted once handled, left for redelivery after the 20 s visibility timeout when handling
  fails, and deleted at once when it does not parse;
* ``DescribeInstanceStatus`` every minute (``check_instance_status``): a failed instance or
  system check for 120 s terminates forcefully, a scheduled event drains normally.

A spot interruption, a scheduled change, an instance stopping or terminating and a capacity
reservation's interruption each start a forced disruption of the node (``disruption.force``):
tainted, drained through PDBs and do-not-disrupt until its grace period, terminated; its pods
count as pending at once, so the new capacity launches while it drains. A spot interruption
also marks its offering unavailable for 3 minutes. A rebalance recommendation is an event
only, unless the NodePool says ``karpweb.io/rebalance: replace``: then the same early
replacement starts, within the pool's disruption budget for drift.

Each message (each instance of it) is an ``Interruption`` row, shown on the Interruptions page
and counted for the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from provisioning import cluster
from provisioning.cloud import messages, reservations
from provisioning.cloud.base import MessageQueue, QueueMessage
from provisioning.cloud.instancestatus import Unhealthy, unhealthy
from provisioning.models import ClusterNode, Disruption, Interruption, NodeClaim, NodePool
from provisioning.services import events
from provisioning.services import reservations as reservation_counts

log = logging.getLogger(__name__)

REBALANCE_ANNOTATION = "karpweb.io/rebalance"
UNPARSABLE = "unparsable"
SPOT_UNAVAILABLE_SECONDS = 180  # upstream's UnavailableOfferingsTTL
# Upstream's ReceiveMessage: 10 messages, a 20 s long poll, hidden 20 s while handled.
RECEIVE = {"max_messages": 10, "wait_seconds": 20, "visibility_seconds": 20}
PARALLELISM = 10
SEEN_KEY = "karpweb:instance-status:seen"


# ------------------------------------------------------------------ the queue


def handle(message: QueueMessage, now: datetime | None = None) -> list[Interruption]:
    """Parse one queue message and act on it. Raises when acting failed (the caller leaves
    the message for redelivery); a message that does not parse is recorded and logged."""
    now = now or timezone.now()
    try:
        parsed = messages.parse(message.body)
    except messages.UnparsableMessage as exc:
        log.error("interruption queue: message %s does not parse: %s", message.message_id, exc)
        common = {"kind": UNPARSABLE, "message_id": message.message_id, "summary": str(exc)[:300]}
        common |= {"received_at": now, "detail": {"body": message.body[:2000]}, "deliveries": message.receive_count}
        return [_once(common, action="logged and deleted: it does not parse")]
    rows = act(parsed, now, source=Interruption.Source.QUEUE, message_id=message.message_id)
    if message.receive_count > 1:
        Interruption.objects.filter(pk__in=[r.pk for r in rows]).update(deliveries=message.receive_count)
    return rows


def consume(queue: MessageQueue, stop: Callable[[], bool], receive: dict | None = None) -> int:
    """Long-poll ``queue`` until ``stop()``; the messages handled."""
    handled = 0
    with ThreadPoolExecutor(PARALLELISM, thread_name_prefix="interruption") as pool:
        try:
            while not stop():
                batch = queue.receive(**(receive or RECEIVE))
                handled += handle_batch(queue, batch, pool)
        finally:
            pool.map(lambda _: connection.close(), range(PARALLELISM))
    return handled


def handle_batch(queue: MessageQueue, batch: Iterable[QueueMessage], pool: ThreadPoolExecutor | None = None) -> int:
    """Handle a batch in parallel (as upstream, 10 at a time); each message handled is
    deleted, one whose handling failed is left to come back. Returns the messages deleted."""
    batch = list(batch)
    if not batch:
        return 0
    if pool is None:
        return sum(_handle_and_delete(queue, m) for m in batch)
    return sum(pool.map(lambda m: _handle_and_delete(queue, m, in_thread=True), batch))


def _handle_and_delete(queue: MessageQueue, message: QueueMessage, in_thread: bool = False) -> int:
    if in_thread:
        close_old_connections()  # a pool thread's connection may have outlived the database's patience
    try:
        rows = handle(message)
    except Exception:
        log.exception(
            "interruption queue: handling message %s failed; it comes back after the visibility timeout",
            message.message_id,
        )
        return 0
    # Marked first: a worker that dies between the two leaves a row that says deleted and a
    # message that comes back, is handled again (finding its row) and deleted; never the other
    # way round, a message gone with a row that says it is still there.
    marked = Interruption.objects.filter(pk__in=[r.pk for r in rows])
    marked.update(deleted=True)
    try:
        queue.delete(message)
    except Exception as exc:  # handled twice at worst: every action is idempotent
        log.warning("interruption queue: deleting message %s failed: %s", message.message_id, exc)
        marked.update(deleted=False)
        return 0
    return 1


# ------------------------------------------------------------------ acting


def act(
    message: messages.Message,
    now: datetime,
    *,
    source: str,
    message_id: str = "",
    forceful: bool = False,
    detail: dict | None = None,
) -> list[Interruption]:
    """Act on every instance the message names; one row each (one for a no-op)."""
    common = {
        "source": source,
        "kind": message.kind,
        "message_id": message_id or message.id,
        "summary": message.summary[:300],
        "event_time": message.time,
        "received_at": now,
        "detail": detail if detail is not None else message.detail,
    }
    if message.kind == messages.NO_OP or not message.instance_ids:
        return [_once(common, action="no action: not an event karpweb acts on")]
    return [_act_on(instance, message.kind, now, common, forceful) for instance in message.instance_ids]


def _once(fields: dict, action: str) -> Interruption:
    """The row of a message that names no instance, once whatever its redeliveries."""
    if fields.get("message_id"):
        found = Interruption.objects.filter(message_id=fields["message_id"], instance_id="").first()
        if found is not None:
            return found
    return Interruption.objects.create(**fields, action=action)


def _act_on(instance_id: str, kind: str, now: datetime, common: dict, forceful: bool) -> Interruption:
    from provisioning.services import disruption

    # A redelivered message (its handling failed midway) finds its row and acts again.
    row = None
    if common["message_id"]:
        row = Interruption.objects.filter(message_id=common["message_id"], instance_id=instance_id).first()
    row = row or Interruption(**common, instance_id=instance_id)
    claim = (
        NodeClaim.objects.filter(instance_id=instance_id)
        .exclude(state__in=(NodeClaim.State.TERMINATED, NodeClaim.State.FAILED))
        .first()
    )
    if claim is None:
        row.action = "no NodeClaim of this cluster has this instance: nothing to do"
        row.save()
        return row
    node = ClusterNode.objects.filter(name=claim.node_name).first() if claim.node_name else None
    node = node or ClusterNode.objects.filter(instance_id=instance_id).first()
    row.nodeclaim, row.nodepool, row.capacity_type = claim.name, claim.nodepool_name, claim.capacity_type
    row.node = node.name if node else ""
    if node is not None:
        row.pods = sorted(node_pods(node.name))
    done: list[str] = []
    events.record(events.interruption(kind, claim.name, node), cluster.get_cluster())
    if kind == messages.SPOT_INTERRUPTED and claim.instance_type and claim.zone:
        _mark_spot_unavailable(claim, kind)
        done.append(f"spot {claim.instance_type} in {claim.zone} avoided for {SPOT_UNAVAILABLE_SECONDS // 60} min")
    if kind == messages.CAPACITY_RESERVATION_INTERRUPTED:
        rid = claim.node_labels().get(reservations.RESERVATION_ID_LABEL) or (
            node.manifest.get("metadata", {}).get("labels", {}).get(reservations.RESERVATION_ID_LABEL) if node else ""
        )
        if rid and reservation_counts.mark_full(rid):
            done.append(f"capacity reservation {rid} counted full until it is described again")
    if kind == messages.REBALANCE_RECOMMENDATION:
        allowed, why = _rebalance_allowed(claim, node, now)
        if not allowed:
            row.action = why
            row.save()
            return row
    if claim.state == NodeClaim.State.DELETING:
        done.append("already being deleted")
    elif node is None:
        # Not registered yet: nothing runs on it to drain.
        from provisioning.services.cloud import get_cloud
        from provisioning.services.provision import terminate_claim

        if claim.move(NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING, reason=kind):
            terminate_claim(claim, get_cloud())
        events.record(events.terminating_on_interruption(claim.name, None), cluster.get_cluster())
        done.append("terminated before it registered")
    else:
        explanation = f"{common['summary']} for {instance_id}"
        forced = disruption.force(node.name, kind, now, forceful=forceful, explanation=explanation)
        row.disruption = forced
        events.record(events.terminating_on_interruption(claim.name, node), cluster.get_cluster())
        how = "terminated at once (forceful)" if forced.terminate_by else "drained"
        done.append(f"{how}; {len(row.pods)} pods planned elsewhere now")
    row.action = "; ".join(done)
    row.save()
    log.info(
        "interruption %s of %s (node %s): %s",
        kind,
        instance_id,
        row.node or "-",
        row.action,
        extra={"event": "interruption", "kind": kind, "instance": instance_id, "node": row.node},
    )
    return row


def node_pods(node: str) -> list[str]:
    from provisioning.models import ClusterPod

    return [f"{ns}/{name}" for ns, name in ClusterPod.objects.filter(node_name=node).values_list("namespace", "name")]


def _mark_spot_unavailable(claim: NodeClaim, reason: str) -> None:
    from provisioning.cloud import ice
    from provisioning.services.connections import get_redis

    ice.mark_unavailable(get_redis(), "spot", claim.instance_type, claim.zone, reason, SPOT_UNAVAILABLE_SECONDS)


def _rebalance_allowed(claim: NodeClaim, node: ClusterNode | None, now: datetime) -> tuple[bool, str]:
    """Whether a rebalance recommendation replaces the node: the NodePool asks for it and its
    disruption budget for drift has room (the node would be replaced for its own sake, as a
    drifted one is)."""
    from provisioning.disruption import budgets
    from provisioning.disruption.model import DRIFTED, PoolPolicy
    from provisioning.services.disruption import ACTIVE

    pool = NodePool.objects.filter(name=claim.nodepool_name).first()
    if pool is None or (pool.annotations or {}).get(REBALANCE_ANNOTATION) != "replace":
        return False, f"event only: NodePool {claim.nodepool_name} does not set {REBALANCE_ANNOTATION}: replace"
    if node is None:
        return True, ""
    try:
        policy = PoolPolicy.from_spec(pool.name, pool.spec)
    except ValueError as exc:
        return False, f"not replaced: NodePool {pool.name}'s disruption settings cannot be read ({exc})"
    nodes = list(ClusterNode.objects.filter(nodepool=pool.name).values_list("name", flat=True))
    disrupting = {n for d in Disruption.objects.filter(state__in=ACTIVE) for n in d.nodes}
    room = budgets.allowed(policy, DRIFTED, len(nodes), len(disrupting & set(nodes)), now.timestamp())
    if room <= 0:
        return False, f"not replaced: NodePool {pool.name}'s disruption budget allows no more nodes now"
    return True, ""


# ------------------------------------------------------------------ DescribeInstanceStatus


def check_instance_status(cloud=None, redis=None, now: datetime | None = None) -> list[Interruption]:
    """One poll of instance health (every minute). Each (instance, category) newly unhealthy
    is recorded once, until it recovers (a Redis set remembers, as upstream's ``seen``);
    its node is disrupted every poll while it stays so (idempotent)."""
    from provisioning.services.cloud import get_cloud
    from provisioning.services.connections import get_redis

    now = now or datetime.now(UTC)
    redis = redis or get_redis()
    try:
        found = unhealthy((cloud or get_cloud()).instance_statuses(), now)
    except Exception as exc:
        if "UnauthorizedOperation" in str(exc):
            log.error(
                "ec2:DescribeInstanceStatus is not allowed: add it to the worker's IAM policy "
                "(deploy/aws/iam-policy.json) to act on instance health"
            )
            return []
        raise
    keys = {f"{u.instance_id}:{u.kind}" for u in found}
    seen = {k.decode() if isinstance(k, bytes) else k for k in redis.smembers(SEEN_KEY)}
    rows = []
    for item in found:
        key = f"{item.instance_id}:{item.kind}"
        row = _act_on_health(item, now, new=key not in seen)
        if row is not None:
            rows.append(row)
    pipe = redis.pipeline()
    pipe.delete(SEEN_KEY)
    if keys:
        pipe.sadd(SEEN_KEY, *sorted(keys))
    pipe.execute()
    return rows


def _act_on_health(item: Unhealthy, now: datetime, *, new: bool) -> Interruption | None:
    """Disrupt an unhealthy instance's node; its row when it is newly seen and ours."""
    owned = NodeClaim.objects.filter(instance_id=item.instance_id, state__in=NodeClaim.ACTIVE_STATES).exists()
    if not owned:
        return None
    message = messages.Message(
        item.kind,
        (item.instance_id,),
        time=item.since,
        source="ec2.DescribeInstanceStatus",
        detail={"category": item.category, "checks": list(item.checks)},
    )
    if settings.KARPWEB_INSTANCE_STATUS_DRY_RUN:
        if not new:
            return None
        return Interruption.objects.create(
            source=Interruption.Source.INSTANCE_STATUS,
            kind=item.kind,
            summary=message.summary,
            event_time=item.since,
            received_at=now,
            instance_id=item.instance_id,
            action="dry run: counted, not acted on",
            detail=message.detail,
        )
    common_id = f"{item.kind}:{item.instance_id}:{int(item.since.timestamp())}"
    rows = act(
        message,
        now,
        source=Interruption.Source.INSTANCE_STATUS,
        message_id=common_id,
        forceful=item.forceful,
        detail=message.detail,
    )
    return rows[0] if new else None


# ------------------------------------------------------------------ how long pods waited


def pods_running_again(row: Interruption, bound: dict | None = None) -> float | None:
    """Seconds from the message to the moment every pod that was on the node runs again
    (bound elsewhere after the message); None while some still wait. ``bound``: (namespace,
    name) → (node, bound_at) of the pods, when already read (``pods_bound``)."""
    if not row.pods or not row.node:
        return None
    keys = [tuple(p.split("/", 1)) for p in row.pods if "/" in p]
    bound = pods_bound([row]) if bound is None else bound
    latest = row.received_at
    for key in keys:
        if key not in bound:
            continue  # gone for good (scaled down): nothing waits for it
        node, at = bound[key]
        if not node or node == row.node or at is None or at < row.received_at:
            return None
        latest = max(latest, at)
    return (latest - row.received_at).total_seconds()


def pods_bound(rows: Iterable[Interruption]) -> dict[tuple[str, str], tuple[str, datetime | None]]:
    """Where the pods of ``rows`` are now, in one query."""
    from provisioning.models import ClusterPod

    names = {p.split("/", 1)[1] for row in rows for p in row.pods or () if "/" in p}
    if not names:
        return {}
    found = ClusterPod.objects.filter(name__in=names).values_list("namespace", "name", "node_name", "bound_at")
    return {(ns, name): (node, at) for ns, name, node, at in found}
