"""Disruption: every 10 s, plan with the pure planners (``provisioning.disruption``), and
carry each command through its steps.

    planned ──15 s, re-planned against fresh state──▶ tainted karpenter.sh/disrupted,
    replacing ──replacements Ready──▶ draining (evict in upstream's order through PDBs)
    ──empty──▶ terminated in EC2 ──▶ done;   or cancelled when the re-check no longer finds
    it, or when a replacement fails or is not initialized within ``command_timeout`` (the
    taint is removed).

A command is planned each round; several may be in progress at once within the budgets, as
in upstream's orchestration queue; expiration is forceful (no replacement first, no budget).
Every step is recorded on the ``Disruption`` row with its reason and savings, for the
dashboard; every node left alone gets a sentence saying why.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from provisioning.cluster import get_cluster
from provisioning.cluster.base import DISRUPTED_TAINT, ClusterError, Eviction
from provisioning.cluster.simulated import pod_manifest
from provisioning.disruption import drain as draining
from provisioning.disruption import drift, planner
from provisioning.disruption.candidates import RECHECK_BACKOFF_WINDOW_SECONDS
from provisioning.disruption.eviction import reschedulable
from provisioning.disruption.model import UNDERUTILIZED, Command, PoolPolicy, Progress, parse_duration
from provisioning.disruption.nodes import POOL, Claim, parse_time
from provisioning.models import ClusterNode, ClusterPod, Disruption, EC2NodeClass, NodeClaim, NodePool
from provisioning.scheduling.manifestfields import PodError
from provisioning.scheduling.podspec import pod_from_manifest
from provisioning.services import events
from provisioning.services.dispatch import dispatcher
from provisioning.services.disruptionview import Picture, read_picture

log = logging.getLogger(__name__)

VALIDATION_DELAY = timedelta(seconds=15)  # upstream re-checks a command 15 s after planning it
# How long a started command waits for its replacements (upstream's GetMaxRetryDuration): 80 ms
# per node of the commands waiting, at least 10 min, at most 1 h.
MIN_COMMAND_TIMEOUT = timedelta(minutes=10)
MAX_COMMAND_TIMEOUT = timedelta(hours=1)
COMMAND_TIMEOUT_PER_NODE = timedelta(milliseconds=80)
MIN_DRAIN = timedelta(seconds=5)  # upstream's minDrainTime: a node drained is terminated no sooner
EXCLUDE_FROM_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
ACTIVE = (Disruption.State.PLANNED, Disruption.State.REPLACING, Disruption.State.DRAINING)


def drift_hashes(nodepool: str, nodeclass: str) -> dict[str, str]:
    """The hashes a new NodeClaim records, to be compared later (``disruption.drift``)."""
    return drift_hashes_of(
        NodePool.objects.filter(name=nodepool).first(), EC2NodeClass.objects.filter(name=nodeclass).first()
    )


def drift_hashes_of(pool: NodePool | None, nc: EC2NodeClass | None) -> dict[str, str]:
    """:func:`drift_hashes` of policies already read."""
    return drift.hashes((pool.spec if pool else {}).get("template") or {}, nc.spec if nc else {})


# ------------------------------------------------------------------ one round


def run(now=None) -> Disruption | None:
    """One disruption round: carry every command in progress on (re-checks, starts, the wait for
    replacements), plan the next, then drain. Several commands may be in progress at once, as
    in upstream's orchestration queue: their nodes use up the budgets and their pods need a home
    in every later simulation, and an expiring node never holds consolidation up.

    A round aims at ``KARPWEB_DISRUPTION_ROUND_SECONDS``: consolidation gets what the steps
    before it left (at least half a second; when re-checks took half the round, no planning
    this round), and the drains come last with what is left then (also
    at least half a second, upstream's eviction queue being rate-limited too): a drain's nodes not
    begun by then are drained next round."""
    started = time.perf_counter()
    now = now or timezone.now()
    current = list(Disruption.objects.filter(state__in=ACTIVE).order_by("planned_at"))
    rechecked = [d for d in current if d.state == Disruption.State.PLANNED]
    waiting = sum(len(d.nodes) for d in current if d.state == Disruption.State.REPLACING)
    for disruption in current:
        advance(disruption, now, waiting_nodes=waiting, drain=False)
    _release_strays()
    result = _plan_round(now, rechecked, started)
    drains_until = max(time.perf_counter() + MIN_DRAIN_SECONDS, started + settings.KARPWEB_DISRUPTION_ROUND_SECONDS)
    for disruption in Disruption.objects.filter(state=Disruption.State.DRAINING).order_by("planned_at"):
        _drain(disruption, now, drains_until)
    return result if result is not None else next(iter(current), None)


def _plan_round(now, rechecked: list[Disruption], started: float) -> Disruption | None:
    """Plan the round's commands and record them; the first one recorded (or the command its
    re-check dropped, when that leaves no method to try)."""
    # A command the re-check dropped: the methods after its own are tried now, as upstream's
    # loop goes on to the next method (after repacking, the last, nothing is).
    dropped = [d for d in rechecked if d.state == Disruption.State.CANCELLED]
    methods = [d.method or planner.method_of(d.reason, len(d.nodes)) for d in dropped]
    last = max((planner.METHODS.index(m) for m in methods if m), default=None)
    if last is not None and last == len(planner.METHODS) - 1:
        return dropped[0]
    spent = time.perf_counter() - started
    rechecks = any(now - d.planned_at >= VALIDATION_DELAY for d in rechecked)
    if rechecks and spent > settings.KARPWEB_DISRUPTION_ROUND_SECONDS / 2:
        # Each re-check reads the whole cluster and simulates; after half the round, planning
        # (reading it again, the simulations, the notes) would run the round well past its time.
        # The next round has no re-check of a command planned now, so it plans first thing.
        log.info("disruption round: the re-checks took %.1f s, half the round: planning waits a round", spent)
        return next(iter(dropped), None)
    result = plan(now, after=None if last is None else planner.METHODS[last], round_started=started)
    recorded = [_record(command, now, drain=False) for command in result.commands]
    return next(iter(recorded), None)


def _release_strays() -> None:
    """A karpenter.sh/disrupted taint no command in progress explains (a worker died between
    steps) is removed, as upstream's controller strips it every round."""
    active = {n for d in Disruption.objects.filter(state__in=ACTIVE) for n in d.nodes}
    cluster = None
    for node in ClusterNode.objects.exclude(name__in=active).only("name", "manifest"):
        taints = (node.manifest.get("spec") or {}).get("taints") or []
        if any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            cluster = cluster or get_cluster()
            cluster.untaint(node.name, DISRUPTED_TAINT)
            log.info("node %s: removed a karpenter.sh/disrupted taint no disruption in progress explains", node.name)


def plan(now=None, recheck: Disruption | None = None, after: str | None = None, round_started: float | None = None):
    """The planners' view of the cluster now; also writes each node's note for the dashboard.

    ``recheck``: a planned command being validated. Only its nodes may be chosen then (the
    others still count for budgets and still take pods), so the question the planners answer
    is "can these nodes still go, this way?", not "are they still the first choice?".
    ``round_started`` (``time.perf_counter()``): when the round began, so consolidation keeps
    to what is left of ``KARPWEB_DISRUPTION_ROUND_SECONDS``."""
    now = now or timezone.now()
    picture = _picture(now, recheck)
    candidates = picture.candidates
    if recheck is not None:
        planned = set(recheck.nodes)
        candidates = [
            c
            if c.name in planned or c.blocked_by
            else replace(c, blocked_by="not part of the command being re-checked")
            for c in candidates
        ]
        # A repacking is asked again by repacking alone: upstream's methods, tried first, may
        # find another command over some of its nodes, which would cancel it for nothing.
        method = recheck.method or planner.method_of(recheck.reason, len(recheck.nodes))
        after = planner.SINGLE_NODE if method == planner.REPACKING else None
        return _run_planner(picture, candidates, now, recheck=True, after=after)
    result = _run_planner(
        picture,
        candidates,
        now,
        after=after,
        budget_seconds=_consolidation_seconds(round_started),
        progress=_progress(),
    )
    _progress(result.progress)
    _stamp_drift(candidates, now)
    in_command = {name for c in result.commands for name in c.candidates}
    for name, why in result.not_candidates.items():
        ClusterNode.objects.filter(name=name).exclude(disruption_note=why).update(disruption_note=why[:2000])
    ClusterNode.objects.filter(name__in=in_command).update(disruption_note="chosen for disruption")
    why_blocked = dict(picture.left_out)
    for c in candidates:
        if c.nodepool not in picture.policies:
            why_blocked[c.name] = f"NodePool not found (NodePool={c.nodepool})"
        elif c.unconsolidatable or c.blocked_by:
            why_blocked[c.name] = c.unconsolidatable or c.blocked_by or ""
    nodes = ClusterNode.objects.filter(name__in=why_blocked)
    events.record([e for node in nodes for e in events.blocked(node, why_blocked[node.name])], get_cluster())
    events.record([e for command in result.commands for e in _approved(command)], get_cluster())
    return result


def _approved(command: Command) -> list:
    """ConsolidationApproved, for a consolidation Balanced NodePools approved: on the node when
    it goes alone, else on each NodePool (upstream's single- and multi-node events)."""
    if not command.scores:
        return []
    if len(command.candidates) > 1:
        return [events.consolidation_approved_pool(pool, score) for pool, score in command.scores]
    node = ClusterNode.objects.filter(name=command.candidates[0]).first()
    return [e for _, score in command.scores for e in events.consolidation_approved(node, score)] if node else []


def what_if(now=None) -> dict:
    """What the round would plan now and why each node is or is not chosen, as
    ``simulate --disruption`` answers for documents; nothing is written."""
    from provisioning.services.disruptionview import answer

    started = time.perf_counter()
    now = now or timezone.now()
    picture = _picture(now)
    result = _run_planner(
        picture,
        picture.candidates,
        now,
        budget_seconds=settings.KARPWEB_CONSOLIDATION_SECONDS,
        # Where the next round's single-node consolidation goes on, read, not moved; every
        # candidate is looked at (not skipped as a round that is repacking's turn would).
        progress=Progress(single_node=_progress().single_node),
    )
    return answer(picture, picture.candidates, result, time.perf_counter() - started)


def _run_planner(picture: Picture, candidates, now, **options):
    """The pure planner over the picture, with the feature gates the settings set."""
    return planner.plan(
        candidates,
        picture.policies,
        picture.snapshot,
        now.timestamp(),
        spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION,
        repacking=settings.KARPWEB_REPACKING,
        **options,
    )


MIN_CONSOLIDATION_SECONDS = 0.5  # however long the round's other work took: consolidation goes on
MIN_DRAIN_SECONDS = 0.5  # and so do the drains, after it


def _consolidation_seconds(round_started: float | None) -> float:
    """How long this round's consolidation simulations may take: KARPWEB_CONSOLIDATION_SECONDS,
    or what is left of KARPWEB_DISRUPTION_ROUND_SECONDS (less the drains' half second) when that
    is less."""
    budget = settings.KARPWEB_CONSOLIDATION_SECONDS
    if round_started is None:
        return budget
    left = settings.KARPWEB_DISRUPTION_ROUND_SECONDS - MIN_DRAIN_SECONDS - (time.perf_counter() - round_started)
    return min(budget, max(MIN_CONSOLIDATION_SECONDS, left))


PROGRESS_KEY = "karpweb:disruption:consolidation-progress"


_progress_here = Progress()  # without Redis: this process's own


def _progress(value: Progress | None = None) -> Progress:
    """Where consolidation goes on this round (read), or next round (``value``): kept in Redis
    so every worker goes on from the same place. Without Redis this process keeps it (starting
    from the top every round would never look past the first candidates a round has time for,
    and repacking, after them, would never get its turn)."""
    global _progress_here
    from provisioning.services import connections

    if value is not None:
        _progress_here = value
    try:
        redis = connections.get_redis()
        if value is not None:
            redis.set(PROGRESS_KEY, json.dumps(asdict(value)))
            return value
        stored = redis.get(PROGRESS_KEY)
    except Exception as exc:
        log.debug("consolidation's progress not in Redis (kept by this process): %s", exc)
        return _progress_here
    try:
        return Progress(**json.loads(stored)) if stored else Progress()
    except (TypeError, ValueError):  # written by another version: start over
        return Progress()


def _stamp_drift(candidates, now) -> None:
    """Keep on each claim when it was first seen drifted (the earliest drift is replaced
    first, as upstream orders by its Drifted condition), and forget it once it is not."""
    drifted = {c.nodeclaim: c for c in candidates if c.drift_reason}
    for claim in NodeClaim.objects.filter(name__in=[c.nodeclaim for c in candidates]):
        stamped = "driftedAt" in claim.spec
        if claim.name in drifted and not stamped:
            claim.spec = {**claim.spec, "driftedAt": now.isoformat()}
        elif claim.name not in drifted and stamped:
            claim.spec = {k: v for k, v in claim.spec.items() if k != "driftedAt"}
        else:
            continue
        claim.save(update_fields=["spec"])


def _price_now(row: NodeClaim, types: dict) -> float:
    """What a node costs for consolidation: the price it launched at, unless NodeOverlays price
    its offering now (then their price, as upstream prices candidates from the overlaid
    offerings) or priced it at launch and no longer do (then its list price): adding or
    removing a Savings Plan changes what moving off a node saves. A node in a capacity
    reservation costs what its reserved offering does (on-demand / 10^7, as upstream prices a
    reserved candidate): moving work onto a reservation pays, moving between them does not."""
    price = float(row.price_per_hour or 0)
    if row.capacity_type == "reserved":
        from provisioning.cloud.reservations import RESERVED_PRICE_DIVISOR

        return float(row.list_price_per_hour or row.price_per_hour or 0) / RESERVED_PRICE_DIVISOR
    it = types.get(row.instance_type)
    offering = None
    if it is not None:
        offering = next((o for o in it.offerings if (o.zone, o.capacity_type) == (row.zone, row.capacity_type)), None)
    if offering is not None and offering.overlays and offering.price is not None:
        return float(offering.price)
    if row.list_price_per_hour is not None and row.list_price_per_hour != row.price_per_hour:
        return float(row.list_price_per_hour)
    return price


def _policy(pool: NodePool) -> PoolPolicy | None:
    try:
        return PoolPolicy.from_spec(pool.name, pool.spec)
    except ValueError as exc:  # the validator lets nothing through that fails here
        log.warning("NodePool %s: disruption settings unreadable: %s", pool.name, exc)
        return None


def _picture(now, recheck: Disruption | None = None) -> Picture:
    """The cluster's rows as documents, read as ``simulate --disruption`` reads files: the
    policies, every node with its pods, the claims in flight, the pending pods, the
    PodDisruptionBudgets; each node's NodeClaim row says what its labels do not."""
    from provisioning.services.catalog import load_catalog
    from provisioning.services.provision import cluster_documents

    catalog = load_catalog()
    documents, included = cluster_documents(catalog)
    # (Those already included are left out here rather than in the query: an IN list of
    # thousands of ids cost more than the few pending rows it saves.)
    documents += [pod_manifest(p) for p in ClusterPod.objects.filter(node_name="") if p.pk not in included]
    if not any(d.get("kind") == "PodDisruptionBudget" for d in documents):
        documents += _pdbs()
    # (What a claim was planned with, its options and pods, is not read: at a thousand nodes
    # decoding it took a tenth of the round.)
    claims = {
        c.node_name: c
        for c in NodeClaim.objects.filter(state__in=(*NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING))
        .exclude(node_name="")
        .defer("launch_options", "pods", "alternatives", "why")
    }
    in_flight = set(
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES, node_name="").values_list("name", flat=True)
    )
    nominated = set(
        ClusterPod.objects.filter(node_name="").exclude(nominated="").values_list("nominated", flat=True).distinct()
    )
    # A replacement takes the pods of nodes still draining: the provisioner counts on it as
    # upstream's nominates it for them, so it is no candidate meanwhile.
    replacing = set(
        NodeClaim.objects.filter(disruption__state__in=ACTIVE).exclude(node_name="").values_list("name", flat=True)
    )
    active = Disruption.objects.filter(state__in=ACTIVE)
    if recheck is not None:
        active = active.exclude(pk=recheck.pk)
    disrupting = {n for d in active for n in d.nodes}
    pools = {p.name: p for p in NodePool.objects.all()}
    nodeclasses = {c.name: c for c in EC2NodeClass.objects.all()}
    changed = dict(ClusterNode.objects.exclude(last_pod_change_at=None).values_list("name", "last_pod_change_at"))
    cancelled = recheck_cancels(now)

    by_pool: dict[str, tuple] = {}

    def offered_types(snapshot, name: str):
        """A NodePool as the snapshot offers it and its instance types by name, read once."""
        if name not in by_pool:
            pools = (*snapshot.nodepools, *(s.pool for s in snapshot.static_nodepools))
            offered = next((p for p in pools if p.name == name), None)
            by_pool[name] = (offered, {t.name: t for t in offered.instance_types} if offered else {})
        return by_pool[name]

    def claim_of(node, snapshot) -> Claim | str:
        row = claims.get(node.name)
        if row is None:
            if node.name in in_flight:
                return f"NodeClaim {node.name} has no Node yet: it is launched but not registered"
            return "no NodeClaim of this platform's launched it"
        if row.state == NodeClaim.State.DELETING:
            return f"the node is being deleted: its NodeClaim {row.name} is deleting"
        pool, nodeclass = pools.get(row.nodepool_name), nodeclasses.get(row.nodeclass_name)
        offered, types = offered_types(snapshot, row.nodepool_name)
        reason = None
        if pool is not None and row.state not in (NodeClaim.State.PENDING, NodeClaim.State.LAUNCHING):
            it = types.get(node.labels.get("node.kubernetes.io/instance-type", ""))
            reason = drift.drift_reason(
                labels={**(it.labels if it else {}), **node.labels},
                recorded=row.spec.get("driftHashes") or {},
                template=pool.spec.get("template") or {},
                nodeclass_spec=nodeclass.spec if nodeclass else None,
                nodeclass_status=nodeclass.status if nodeclass else None,
                launched=row.spec.get("launched") or {},
                offered_types=None if offered is None else types.keys(),
                offered=drift.offerings_of(types),
                age_seconds=now.timestamp() - row.created_at.timestamp(),
            )
        own = row.spec.get("expireAfter")
        grace = row.spec.get("terminationGracePeriod")
        seen = parse_time(row.spec.get("driftedAt")) if reason else None
        return Claim(
            name=row.name,
            nodepool=row.nodepool_name,
            instance_type=row.instance_type,
            capacity_type=row.capacity_type,
            zone=row.zone,
            price_per_hour=_price_now(row, types),
            created_at=row.created_at.timestamp(),
            initialized=row.state == NodeClaim.State.INITIALIZED,
            annotations=row.spec.get("annotations") or {},
            expire_after_seconds=POOL if own is None else _duration(own, f"NodeClaim {row.name}: spec.expireAfter"),
            termination_grace_period_seconds=(
                POOL if grace is None else _duration(grace, f"NodeClaim {row.name}: spec.terminationGracePeriod")
            ),
            nominated=row.name in nominated or row.name in replacing,
            drift_reason=None if reason is None else drift.explain(reason, row.nodepool_name, row.nodeclass_name),
            drifted_at=None if reason is None else seen if seen is not None else now.timestamp(),
            disrupting=node.name in disrupting,
            recheck_cancelled=cancelled.get(node.name, ()),
        )

    def last_change(name: str) -> float | None:
        row = claims.get(name)
        moment = changed.get(name) or (row and (row.initialized_at or row.created_at))
        return moment.timestamp() if moment else None

    from provisioning.services.catalog import unavailable_now

    # The ICE cache, as provisioning reads it: a replacement must be launchable now.
    unavailable = unavailable_now()
    return read_picture(
        documents,
        now=now,
        claim_of=claim_of,
        last_pod_change=last_change,
        catalog=catalog,
        unavailable=unavailable.__contains__,
        require_nodeclasses=True,  # the cluster's own: a NodePool whose EC2NodeClass is gone offers nothing
    )


def recheck_cancels(now) -> dict[str, tuple[float, ...]]:
    """Per node, when single-node consolidations of it were cancelled on their re-check
    (cancelled before they started) within the back-off's window, oldest first."""
    since = now - timedelta(seconds=RECHECK_BACKOFF_WINDOW_SECONDS)
    rows = (
        Disruption.objects.filter(
            state=Disruption.State.CANCELLED, reason=UNDERUTILIZED, started_at=None, finished_at__gte=since
        )
        .order_by("finished_at")
        .values_list("nodes", "finished_at")
    )
    out: dict[str, tuple[float, ...]] = {}
    for nodes, finished in rows:
        if len(nodes) == 1:  # (a multi-node command's nodes go on to single-node consolidation)
            out[nodes[0]] = (*out.get(nodes[0], ()), finished.timestamp())
    return out


def _duration(text: str, where: str) -> float | None | str:
    try:
        return parse_duration(text, where)
    except ValueError as exc:
        log.warning("%s", exc)
        return POOL


def _pdbs() -> list[dict]:
    """The cluster's PodDisruptionBudgets (with the status its disruption controller wrote)."""
    try:
        return [dict(pdb, kind="PodDisruptionBudget") for pdb in get_cluster().pdbs()]
    except Exception as exc:  # an unreachable cluster: plan without, evictions still ask
        log.warning("disruption: cannot list PodDisruptionBudgets (%s)", exc)
        return []


def _grace_seconds(claim: NodeClaim | None, pool_name: str) -> float | None:
    """The claim's terminationGracePeriod (fixed when it was created), else its NodePool's."""
    own = (claim.spec.get("terminationGracePeriod") if claim else None) or None
    if own is not None:
        try:
            return parse_duration(own, "spec.terminationGracePeriod", never=False)
        except ValueError:
            pass
    pool = NodePool.objects.filter(name=pool_name).first()
    policy = _policy(pool) if pool is not None else None
    return policy.termination_grace_period_seconds if policy is not None else None


def _record(command: Command, now, drain: bool = True) -> Disruption:
    claims = list(ClusterNode.objects.filter(name__in=command.candidates).values_list("nodeclaim", flat=True))
    disruption = Disruption.objects.create(
        planned_at=now,
        reason=command.reason,
        method=command.method,
        nodes=list(command.candidates),
        nodeclaims=claims,
        replacement_plan=[
            {
                "instanceType": c.options[0].instance_type,
                "capacityType": c.options[0].capacity_type,
                "price": c.options[0].price,
                "options": len(c.options),
                "instanceTypes": sorted({o.instance_type for o in c.options}),
                "pods": len(c.pods),
            }
            for c in command.replacements
        ],
        savings_per_hour=Decimal(str(round(command.savings_per_hour, 6))),
        explanation=command.explanation,
    )
    log.info(
        "disruption %s planned: %s of %s, saves $%.4f/h: %s",
        disruption.pk,
        command.reason,
        ", ".join(command.candidates),
        command.savings_per_hour,
        command.explanation,
        extra={
            "event": "disruption",
            "disruption": disruption.pk,
            "reason": command.reason,
            "method": command.method,
            "nodes": list(command.candidates),
            "nodeclaims": claims,
            "replacements": [r["instanceType"] for r in disruption.replacement_plan],
            "savings_per_hour": round(command.savings_per_hour, 6),
            "explanation": command.explanation,
            "forceful": command.forceful,
        },
    )
    if command.forceful:  # expiration: no waiting, no replacement first
        _start(disruption, command, now, drain)
    return disruption


# ------------------------------------------------------------------ forced disruption


# The reasons of disruptions nobody planned: an interruption message, a broken instance, node
# repair (upstream's message kinds and "unhealthy"). Their nodes go whatever the budgets say.
INVOLUNTARY = frozenset(
    {
        "spot_interrupted",
        "rebalance_recommendation",
        "scheduled_change",
        "instance_stopped",
        "instance_terminated",
        "capacity_reservation_interrupted",
        "capacity_block_expiring",
        "instance_status",
        "system_status",
        "event_status",
        "unhealthy",
    }
)


def force(node_name: str, reason: str, now=None, *, forceful: bool = False, explanation: str = "") -> Disruption:
    """Disrupt one node now, for ``reason`` (an interruption, a broken instance, node repair):
    as upstream deletes its NodeClaim. It is tainted at once, so nothing more lands on it, and
    drained as every disruption drains (through PodDisruptionBudgets and do-not-disrupt until
    its terminationGracePeriod; ``forceful``: nothing waits, as upstream's termination-timestamp
    annotation says). No replacement is planned here: its pods count as pending in the next
    provisioning run, which is asked for now, so their new capacity launches while it drains.

    A node already draining keeps its disruption (made forceful if this is); one only planned
    or waiting for replacements has that command cancelled, its replacements left to take the
    pods."""
    now = now or timezone.now()
    cluster = get_cluster()
    current = [d for d in Disruption.objects.filter(state__in=ACTIVE) if node_name in d.nodes]  # a few rows
    for disruption in current:
        if disruption.state == Disruption.State.DRAINING:
            if forceful and disruption.terminate_by is None:
                Disruption.objects.filter(pk=disruption.pk).update(terminate_by=now)
                disruption.terminate_by = now
            return disruption
        why = f"{node_name} is being disrupted by {reason}"
        if disruption.move(disruption.state, Disruption.State.CANCELLED, message=why, finished_at=now):
            _log_step(disruption, "cancelled", why)
    claims = list(ClusterNode.objects.filter(name=node_name).values_list("nodeclaim", flat=True))
    disruption = Disruption.objects.create(
        planned_at=now,
        reason=reason,
        nodes=[node_name],
        nodeclaims=[c for c in claims if c],
        explanation=explanation,
        state=Disruption.State.DRAINING,
        started_at=now,
        drain_started_at=now,
        terminate_by=now if forceful else None,
        pods_displaced=_displaced([node_name]),
    )
    log.info(
        "disruption %s: %s of %s%s: %s",
        disruption.pk,
        reason,
        node_name,
        " (forceful)" if forceful else "",
        explanation,
        extra={
            "event": "disruption",
            "disruption": disruption.pk,
            "reason": reason,
            "nodes": [node_name],
            "nodeclaims": disruption.nodeclaims,
            "forceful": forceful,
            "explanation": explanation,
        },
    )
    _mark(disruption, cluster)
    ClusterNode.objects.filter(name=node_name).update(disruption_note=f"being drained: {reason} ({explanation})"[:2000])
    dispatcher().pods_pending()  # their new capacity now, not once they are evicted
    _drain(disruption, now)
    return disruption


# ------------------------------------------------------------------ the steps


def advance(disruption: Disruption, now, *, waiting_nodes: int | None = None, drain: bool = True) -> bool:
    """Carry the command one step on; False when it was cancelled (its re-check, a failed
    replacement, the replacements' timeout). ``waiting_nodes``: the nodes of the commands
    waiting on replacements, when the caller has counted them (else they are counted here).
    ``drain``: False leaves a command that is (or becomes) draining to the caller's drains."""
    if disruption.state == Disruption.State.PLANNED:
        if now - disruption.planned_at < VALIDATION_DELAY:
            return True
        fresh = plan(now, recheck=disruption)
        same = next((c for c in (_revalidated(disruption, c) for c in fresh.commands) if c), None)
        if same is None:
            why = _recheck_failure(disruption, fresh)
            if disruption.move(Disruption.State.PLANNED, Disruption.State.CANCELLED, message=why, finished_at=now):
                _log_step(disruption, "cancelled", why)
            return False
        _start(disruption, same, now, drain)
    elif disruption.state == Disruption.State.REPLACING:
        replacements = list(disruption.replacements.all())
        if any(c.state in (NodeClaim.State.FAILED, NodeClaim.State.TERMINATED) for c in replacements):
            return _give_up(disruption, now, "a replacement failed to launch: the nodes are schedulable again")
        waiting = [c for c in replacements if c.state != NodeClaim.State.INITIALIZED]
        if waiting and waiting_nodes is None:
            waiting_nodes = _waiting_nodes()
        timeout = command_timeout(waiting_nodes or 0) if waiting else None
        if timeout is not None and now - (disruption.started_at or disruption.planned_at) > timeout:
            minutes = round(timeout.total_seconds() / 60)
            why = f"its replacements were not initialized within {minutes} min: the nodes are schedulable again"
            return _give_up(disruption, now, why)
        if waiting:
            events.record([events.waiting_readiness(c) for c in waiting], get_cluster())
        elif (
            disruption.move(
                Disruption.State.REPLACING,
                Disruption.State.DRAINING,
                drain_started_at=now,
                pods_displaced=_displaced(disruption.nodes),
            )
            and drain
        ):
            _drain(disruption, now)
    elif disruption.state == Disruption.State.DRAINING and drain:
        _drain(disruption, now)
    return True


def command_timeout(waiting_nodes: int) -> timedelta:
    """How long a started command waits for its replacements to initialize before it gives up
    and gives its nodes back (upstream's GetMaxRetryDuration): the more nodes wait on
    replacements, the more the cloud is asked at once and the longer launches take, so 80 ms a
    node, at least 10 min and at most 1 h."""
    return min(max(COMMAND_TIMEOUT_PER_NODE * waiting_nodes, MIN_COMMAND_TIMEOUT), MAX_COMMAND_TIMEOUT)


def _waiting_nodes() -> int:
    """The nodes of the commands waiting for their replacements (upstream's queue length)."""
    return sum(
        len(nodes)
        for nodes in Disruption.objects.filter(state=Disruption.State.REPLACING).values_list("nodes", flat=True)
    )


def _give_up(disruption: Disruption, now, why: str) -> bool:
    """A started command that will not finish: cancelled, its nodes untainted (its replacements
    stay, to be consolidated like any node). Always False, as ``advance`` answers then."""
    if disruption.move(Disruption.State.REPLACING, Disruption.State.CANCELLED, message=why, finished_at=now):
        _release(disruption)
        _log_step(disruption, "cancelled", why)
    return False


def _still_valid(disruption: Disruption, command: Command) -> bool:
    """The fresh plan still makes this command: the same nodes for the same reason, or, for
    emptiness, a larger set of empty nodes that includes them (deleting a subset of empty
    nodes is as good)."""
    return _revalidated(disruption, command) is not None


def _recheck_failure(disruption: Disruption, fresh) -> str:
    """Why the re-check dropped a planned command, in the words the dashboard shows: what the
    fresh plan says of its nodes, or what it would do with them instead."""
    why = "no longer valid when re-checked 15 s later"
    notes = [f"{name}: {fresh.not_candidates[name]}" for name in disruption.nodes if name in fresh.not_candidates]
    if notes:
        return f"{why}: {'; '.join(notes)}"
    other = next((c for c in fresh.commands if set(c.candidates) & set(disruption.nodes)), None)
    if other is not None:
        now = f"{other.reason} {other.decision}" + (
            f" with {len(other.replacements)} replacement(s)" if other.replacements else ""
        )
        return f"{why}: the nodes would now go by another command ({now}, {', '.join(other.candidates)})"
    return why


def _revalidated(disruption: Disruption, command: Command) -> Command | None:
    """What of the planned command the fresh plan still bears out, or None.

    The same nodes for the same reason, each replacement still offered every instance type it
    was planned with (upstream's instanceTypesAreSubset: a type gone dearer or out of capacity
    means a new decision); for emptiness, the planned nodes still empty (those that gained a
    pod meanwhile are dropped, the others go ahead, as upstream); for a repacking, the same
    nodes repacked again."""
    if command.reason != disruption.reason:
        return None
    planned, fresh = set(disruption.nodes), set(command.candidates)
    if disruption.reason == "Empty":
        kept = [name for name in disruption.nodes if name in fresh]
        if not kept:
            return None
        savings = command.savings_per_hour * len(kept) / max(len(fresh), 1)
        return replace(command, candidates=tuple(kept), savings_per_hour=savings)
    if planned != fresh:
        return None
    if disruption.method == planner.REPACKING:
        # The packing is solved afresh, so its new nodes may come out otherwise: what must hold
        # is that these nodes still repack, saving what repacking asks (at the prices of now).
        return command if command.method == planner.REPACKING else None
    for before, now_claim in zip(disruption.replacement_plan, command.replacements, strict=False):
        types = before.get("instanceTypes")
        if types is not None and not set(types) <= {o.instance_type for o in now_claim.options}:
            return None
    if len(disruption.replacement_plan) != len(command.replacements):
        return None
    return command


def _start(disruption: Disruption, command: Command, now, drain: bool = True) -> None:
    """Taint the nodes ``karpenter.sh/disrupted:NoSchedule`` first, so nothing is scheduled
    onto them and the provisioner plans their pods elsewhere; then launch the replacements,
    or drain at once when there are none."""
    from provisioning.services.provision import create_claims

    cluster = get_cluster()
    if list(command.candidates) != disruption.nodes:  # the re-check dropped nodes that changed
        disruption.nodes = list(command.candidates)
        disruption.nodeclaims = list(
            ClusterNode.objects.filter(name__in=disruption.nodes).values_list("nodeclaim", flat=True)
        )
        disruption.savings_per_hour = Decimal(str(round(command.savings_per_hour, 6)))
        disruption.save(update_fields=["nodes", "nodeclaims", "savings_per_hour"])
    if command.replacements:
        with transaction.atomic():
            if not disruption.move(Disruption.State.PLANNED, Disruption.State.REPLACING, started_at=now):
                return
            _mark(disruption, cluster)
            claims = create_claims(command.replacements, disruption=disruption)
        events.record([events.launching(claim, disruption.reason) for claim in claims], cluster)
        return
    if disruption.move(
        Disruption.State.PLANNED,
        Disruption.State.DRAINING,
        started_at=now,
        drain_started_at=now,
        pods_displaced=_displaced(disruption.nodes),
    ):
        _mark(disruption, cluster)
        if drain:
            _drain(disruption, now)


def _displaced(nodes) -> dict[str, int]:
    """Per NodeClaim of ``nodes``, the reschedulable pods on its node now (as its drain begins)."""
    claims = dict(ClusterNode.objects.filter(name__in=nodes).values_list("name", "nodeclaim"))
    counts = {claims[name]: 0 for name in claims if claims[name]}
    for row in ClusterPod.objects.filter(node_name__in=list(claims)):
        claim = claims.get(row.node_name)
        if claim:
            try:
                counts[claim] += reschedulable(pod_from_manifest(pod_manifest(row)))
            except PodError:  # unreadable: the drain says so; it displaces nothing countable
                continue
    return counts


def _mark(disruption: Disruption, cluster) -> None:
    for name in disruption.nodes:
        cluster.taint(name, DISRUPTED_TAINT)


def _release(disruption: Disruption) -> None:
    """A command that will not go ahead gives its nodes back (upstream removes the taint)."""
    cluster = get_cluster()
    for name in disruption.nodes:
        cluster.untaint(name, DISRUPTED_TAINT)


def _drain(disruption: Disruption, now, until: float | None = None) -> None:
    """Drain each node as upstream's terminator does (``disruption.drain``): evict in groups,
    non-critical before critical and DaemonSet pods after the others, through the
    PodDisruptionBudgets; wait for do-not-disrupt pods; once the terminationGracePeriod since
    the drain began has passed, delete what is left; terminate each node once it is empty (and
    ``MIN_DRAIN`` has passed, so a pod bound just before the taint is drained too). A NotReady
    node whose instance is gone is removed at once: nothing on it will ever finish. Past
    ``until`` (``time.perf_counter()``) the nodes left wait for the next round."""
    from provisioning.services.cloud import get_cloud
    from provisioning.services.provision import terminate_claim

    cluster = get_cluster()
    started = disruption.drain_started_at or now
    waiting: list[str] = []
    gone = _instances_gone(disruption)
    for name in disruption.nodes:
        if until is not None and time.perf_counter() > until:
            waiting.append(f"{name}: drained next round (this round's time for drains is used up)")
            continue
        node = ClusterNode.objects.filter(name=name).first()
        if node is None:
            continue
        if not _prepared(node):  # the drain begins here: once, not every round
            events.record(events.terminating(node, disruption.reason), cluster)
            cluster.taint(name, DISRUPTED_TAINT)
            cluster.cordon(name)
            cluster.label(name, EXCLUDE_FROM_BALANCERS, "karpenter")
        claim = NodeClaim.objects.filter(name=node.nodeclaim).first()
        if node.instance_id not in gone:
            status = _drain_step(disruption, node, claim, started, now, cluster)
            if status:
                waiting.append(f"{name}: {status}")
                continue
            # Upstream waits so only for a node with its one NodeClaim.
            if now - started < MIN_DRAIN and NodeClaim.objects.filter(node_name=name).count() == 1:
                waiting.append(f"{name}: drained; terminated once {MIN_DRAIN.seconds} s have passed since the taint")
                continue
        if claim is not None and claim.move(
            NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING, reason=disruption.reason
        ):
            terminate_claim(claim, get_cloud())
        else:
            cluster.delete_node(name)
    message = "; ".join(waiting)[:2000]
    if waiting:
        if disruption.message != message:
            disruption.message = message
            disruption.save(update_fields=["message"])
        return
    if disruption.move(Disruption.State.DRAINING, Disruption.State.DONE, finished_at=now, message=""):
        _log_step(disruption, "done", "its nodes are terminated")


def _prepared(node: ClusterNode) -> bool:
    """Is the node tainted karpenter.sh/disrupted, cordoned and out of the load balancers?"""
    spec = node.manifest.get("spec") or {}
    labels = (node.manifest.get("metadata") or {}).get("labels") or {}
    tainted = any(
        t.get("key") == DISRUPTED_TAINT["key"] and t.get("effect") == DISRUPTED_TAINT["effect"]
        for t in spec.get("taints") or []
    )
    return tainted and spec.get("unschedulable") is True and EXCLUDE_FROM_BALANCERS in labels


def _drain_step(disruption: Disruption, node: ClusterNode, claim, started, now, cluster) -> str | None:
    """One step of one node's drain; what it still waits for, or None when it is drained."""
    grace = _grace_seconds(claim, node.nodepool)
    deadline = None if grace is None else started.timestamp() + grace
    if disruption.terminate_by is not None:  # forceful: the grace period is over now
        forced = disruption.terminate_by.timestamp()
        deadline = forced if deadline is None else min(deadline, forced)
    rows = {p.key: p for p in ClusterPod.objects.filter(node_name=node.name)}
    step = draining.next_step([pod_manifest(p) for p in rows.values()], now.timestamp(), deadline)
    notes = []
    for pod in step.delete:
        seconds = draining.deletion_grace(now.timestamp(), deadline or now.timestamp())
        cluster.delete_pod(pod.namespace, pod.name, grace_seconds=seconds)
        until = datetime.fromtimestamp(deadline or now.timestamp(), UTC).isoformat()
        notes.append(events.disrupted(rows[pod.key], seconds, int(pod.grace_seconds), until))
    refused = []
    for pod in step.evict:
        try:
            answer = cluster.evict(pod.namespace, pod.name)
        except ClusterError as exc:  # one pod's trouble must not stop the round: next round again
            log.warning("disruption %s: %s", disruption.pk, exc)
            answer = Eviction.REFUSED
        if answer is Eviction.EVICTED:
            notes.append(events.evicted(rows[pod.key], disruption.reason))
        if answer:
            continue
        refused.append(pod.key)
        many = answer is Eviction.REFUSED_MANY_BUDGETS
        why = "eviction does not support multiple PDBs" if many else "evicting pod violates a PDB"
        notes.append(events.failed_draining(node, f"{why} (Pod={pod.key})"))
    events.record(notes, cluster)
    return step.describe(refused)


def _instances_gone(disruption: Disruption) -> set[str]:
    """Instances of the command's NotReady nodes that the cloud no longer has."""
    from provisioning.services.cloud import get_cloud

    nodes = ClusterNode.objects.filter(name__in=disruption.nodes)
    if disruption.reason not in INVOLUNTARY:  # an interrupted instance may go while still Ready
        nodes = nodes.filter(ready=False)
    suspects = {n.instance_id for n in nodes if n.instance_id}
    if not suspects:
        return set()
    try:
        alive = {i.id for i in get_cloud().list_instances(suspects)}
    except Exception as exc:  # the cloud cannot say: keep draining, ask again next round
        log.warning("disruption %s: cannot list instances (%s)", disruption.pk, exc)
        return set()
    return suspects - alive


def _log_step(disruption: Disruption, state: str, why: str) -> None:
    """A later step of a disruption already logged in full when it was planned: the id says which."""
    log.info(
        "disruption %s %s: %s",
        disruption.pk,
        state,
        why,
        extra={"event": f"disruption.{state}", "disruption": disruption.pk, "reason": disruption.reason},
    )
