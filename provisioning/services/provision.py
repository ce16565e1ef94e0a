"""Provisioning: the batch window, one provisioning run at a time, and the plan turned into
a Decision and NodeClaims.

1. ``note_pending`` opens (or extends) the batch window in Redis; the window closes after
   ``KARPWEB_BATCH_IDLE_SECONDS`` without new pods or ``KARPWEB_BATCH_MAX_SECONDS`` in all.
2. ``window_wait`` says how long until it closes; then one run at a time (a Redis lock)
   covers ALL pending pods (not only those that opened the window). ``provision_at_close``
   reads and solves in the window's last 0.7 s and, once it closes, records that
   plan if the cluster is unchanged, so a burst waits for the window and little more.
3. The run builds the solver's snapshot from the policies, the pods and nodes of the cluster
   and the NodeClaims in flight (as nodes holding the pods nominated to them), solves it,
   and records one Decision with its NodeClaims; claims of identical launch input launch
   together by one fleet (``launchbatch``), the others each by its own task, as soon as
   the claims are committed and before the pods' nominations are written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Q, TextField, Value, When
from django.db.models.functions import Cast
from django.utils import timezone

from provisioning.cluster.base import Cluster, ObjectEvent
from provisioning.cluster.simulated import budget_manifests, node_manifest, pod_manifest
from provisioning.models import (
    ClusterNode,
    ClusterPod,
    Decision,
    Disruption,
    EC2NodeClass,
    NodeClaim,
    NodeOverlay,
    NodePool,
)
from provisioning.observability.metrics import (
    BATCH_WINDOW,
    PLAN_VIOLATIONS,
    PROVISIONING_DURATION,
    PROVISIONING_PODS,
    SCHEDULING_DURATION,
    cloud_call,
)
from provisioning.scheduling.plan import ClaimPlan, InstanceTypeOption, Plan
from provisioning.scheduling.verify import verify, withhold
from provisioning.services import events, launchbatch
from provisioning.services.connections import get_redis
from provisioning.services.dispatch import dispatcher

log = logging.getLogger(__name__)

WINDOW_FIRST = "karpweb:batch:first"
WINDOW_LAST = "karpweb:batch:last"
WINDOW_OPEN = "karpweb:batch:open"
PROVISION_LOCK = "karpweb:provision:lock"
IN_FLIGHT = (NodeClaim.State.PENDING, NodeClaim.State.LAUNCHING, NodeClaim.State.LAUNCHED)


# ------------------------------------------------------------------ the batch window


def idle_seconds() -> float:
    return float(settings.KARPWEB_BATCH_IDLE_SECONDS)


def max_seconds() -> float:
    return float(settings.KARPWEB_BATCH_MAX_SECONDS)


def note_pending(now: float | None = None, redis: Any = None) -> bool:
    """Pending pods were seen: open the window or extend it. True for the caller that
    opened it (that caller schedules the window's check)."""
    redis = redis or get_redis()
    now = time.time() if now is None else now
    pipe = redis.pipeline()
    pipe.set(WINDOW_LAST, repr(now))
    pipe.set(WINDOW_FIRST, repr(now), nx=True)
    # The flag expires on its own, so a lost check never keeps the window shut for good.
    pipe.set(WINDOW_OPEN, "1", nx=True, ex=int(max_seconds() + 30))
    _, _, opened = pipe.execute()
    return bool(opened)


def window_open(redis: Any = None) -> bool:
    return bool((redis or get_redis()).exists(WINDOW_OPEN))


def window_wait(now: float | None = None, redis: Any = None) -> float:
    """Seconds until the window closes; 0 means closed now (and the window is reset)."""
    redis = redis or get_redis()
    now = time.time() if now is None else now
    first, last = redis.mget(WINDOW_FIRST, WINDOW_LAST)
    if first is None or last is None:
        redis.delete(WINDOW_OPEN)
        return 0.0
    idle_left = float(last) + idle_seconds() - now
    max_left = float(first) + max_seconds() - now
    wait = min(idle_left, max_left)
    if wait > 0:
        return wait
    redis.delete(WINDOW_FIRST, WINDOW_LAST, WINDOW_OPEN)
    BATCH_WINDOW.observe(max(0.0, now - float(first)))
    return 0.0


# ------------------------------------------------------------------ one provisioning run


def provision(solve: Callable | None = None, redis: Any = None, cluster: Cluster | None = None) -> Decision | None:
    """One provisioning run under the lock; None when another run holds it or there is
    nothing pending. ``cluster`` (default: the configured one) gets the run's events."""
    redis = redis or get_redis()
    lock = redis.lock(PROVISION_LOCK, timeout=300, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return None
    try:
        return provision_once(solve, cluster)
    finally:
        _release(lock)


def provision_at_close(
    solve: Callable | None = None, redis: Any = None, cluster: Cluster | None = None
) -> tuple[float, Decision | None]:
    """The last ``lookahead_seconds`` of the batch window: prepare the run (read and solve)
    while the window is still open, then record it the moment the window closes if nothing
    changed meanwhile; otherwise solve again.

    Returns the seconds until the window is to be checked again (0 when this call ran) and
    the Decision (None when nothing was pending). Again later: new pods pushed the close
    back beyond the lookahead (the prepared run is discarded), or another run holds the
    lock (checked again in ``LOCK_RETRY_SECONDS``, so its pods are not left to the sweep).

    The window closes as before (idle 1 s, at most 10 s), so what a run covers is
    unchanged; only its reading and solving overlap the window's idle end.
    """
    redis = redis or get_redis()
    lock = redis.lock(PROVISION_LOCK, timeout=300, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return LOCK_RETRY_SECONDS, None
    try:
        with collector_paused():
            prepared: Solved | None = None
            tried = False
            while (wait := window_wait(redis=redis)) > 0:
                ahead = lookahead_seconds()
                if wait > ahead:
                    return wait - ahead, None
                if not tried:
                    tried = True
                    prepared = solve_inputs(solve)
                else:
                    time.sleep(wait)
            return 0.0, provision_once(solve, cluster, prepared)
    finally:
        _release(lock)


@contextlib.contextmanager
def collector_paused():
    """No garbage-collection pauses while a run is prepared and recorded. A full collection
    of a worker's heap (the catalog's thousands of instance types and offerings) takes 0.1 to
    0.3 s, and there it would fall between the window's close and the launch. Reference
    counting still frees nearly everything; the collector resumes once the run is recorded."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


LOCK_RETRY_SECONDS = 0.25


# Preparing starts after at least a quarter of the idle window without new pods: a run
# prepared while a burst still arrives is thrown away.
LOOKAHEAD_MAX_SHARE = 0.75


def lookahead_seconds() -> float:
    """How long before the window closes the run is prepared: ``KARPWEB_BATCH_LOOKAHEAD_SECONDS``
    (0 turns preparing off), at most three quarters of the idle window."""
    return max(0.0, min(float(settings.KARPWEB_BATCH_LOOKAHEAD_SECONDS), LOOKAHEAD_MAX_SHARE * idle_seconds()))


def _release(lock) -> None:
    try:
        lock.release()
    except Exception:  # expired meanwhile: the next run takes it
        log.warning("provisioning lock expired before release")


# A pod nominated to a claim whose node just became Ready waits this long for the scheduler
# to bind it before it counts as pending again.
BIND_GRACE_SECONDS = 30


def _nominating() -> Q:
    """Claims whose nominated pods are spoken for: in flight, or Ready only just now."""
    recent = timezone.now() - timedelta(seconds=BIND_GRACE_SECONDS)
    ready_just_now = Q(state__in=(NodeClaim.State.REGISTERED, NodeClaim.State.INITIALIZED), registered_at__gte=recent)
    return Q(state__in=IN_FLIGHT) | ready_just_now


def nominating_claims() -> list[str]:
    return list(NodeClaim.objects.filter(_nominating()).values_list("name", flat=True))


def pending_pods():
    """Pending pods not nominated to a NodeClaim that will take them."""
    return ClusterPod.objects.filter(node_name="").exclude(nominated__in=nominating_claims())


def displaced_pods() -> list[ClusterPod]:
    """Pods still running on nodes being drained with no replacement planned for them (an
    interruption, a broken instance, node repair, expiry): they count as pending, as upstream's
    provisioner reads the deleting nodes' reschedulable pods, so their new capacity launches
    while the old node drains, not once they are evicted. (The snapshot leaves out those that
    will not move: DaemonSet pods, do-not-disrupt, a PodDisruptionBudget that never allows it.)"""
    draining = Disruption.objects.filter(state=Disruption.State.DRAINING).values_list("nodes", "replacement_plan")
    nodes = {name for names, plan in draining if not plan for name in names}
    if not nodes:
        return []
    return list(ClusterPod.objects.filter(node_name__in=nodes, phase=ClusterPod.Phase.RUNNING).order_by("pk"))


@dataclasses.dataclass
class Inputs:
    """Everything a run decides on, read at one moment, with the key that says whether it
    still holds (``verify_key``)."""

    pending: list[ClusterPod]
    documents: list[dict]
    catalog: Any
    unavailable: dict[str, str]
    key: tuple
    read_seconds: float
    displaced: list[ClusterPod] = dataclasses.field(default_factory=list)  # see displaced_pods


def verify_key() -> tuple:
    """What a run prepared before the window closed must find unchanged at the close: every
    pod not bound, as stored (the pending ones, and those nominated to a claim), the claims
    holding nominated pods, the policies with their status, the offerings marked
    unavailable, and the drains whose pods count as pending (``displaced_pods``). Read raw,
    so checking costs a fraction of a run's read. Bound pods and nodes are left out: a run's
    view of them is as old as its read, prepared or not."""
    from provisioning.services.catalog import unavailable_now

    unbound = ClusterPod.objects.filter(node_name="").order_by("pk")
    claims = NodeClaim.objects.filter(_nominating()).order_by("pk")
    return (
        tuple(unbound.values_list("pk", "nominated", "unschedulable_reason", Cast("manifest", TextField()))),
        tuple(claims.values_list("pk", "name", "state", "node_name", "instance_type", "zone", "capacity_type")),
        tuple(NodePool.objects.order_by("pk").values_list("pk", "resource_version", Cast("status", TextField()))),
        tuple(EC2NodeClass.objects.order_by("pk").values_list("pk", "resource_version", Cast("status", TextField()))),
        tuple(NodeOverlay.objects.order_by("pk").values_list("pk", "resource_version")),
        tuple(sorted(unavailable_now().items())),
        tuple(Disruption.objects.filter(state=Disruption.State.DRAINING).order_by("pk").values_list("pk", flat=True)),
    )


@dataclasses.dataclass
class Solved:
    inputs: Inputs
    plan: Plan  # verified: what THE verifier refused is withheld (see ``violations``)
    notes: list[str]
    timings: dict[str, float]
    violations: list = dataclasses.field(default_factory=list)


def read_inputs() -> Inputs | None:
    """The run's inputs; None when no pod is pending. Rows are read in a fixed order, so
    two reads of an unchanged cluster compare equal."""
    from provisioning.services.catalog import load_catalog, unavailable_now

    started = time.perf_counter()
    key = verify_key()  # first: a change after it shows at the close, never one before it
    pending = list(pending_pods().order_by("pk"))
    displaced = displaced_pods()
    if not pending and not displaced:
        return None
    catalog = load_catalog()
    documents, included = cluster_documents(catalog)
    pending = [p for p in pending if p.pk not in included]
    displaced = [p for p in displaced if p.pk in included]  # still bound as read: planned from their node
    if not pending and not displaced:
        return None
    documents += [pod_manifest(p) for p in pending]
    unavailable = unavailable_now()
    return Inputs(pending, documents, catalog, unavailable, key, time.perf_counter() - started, displaced)


def solve_inputs(solve: Callable | None = None, inputs: Inputs | None = None) -> Solved | None:
    """Read (unless given) and solve; None when nothing is pending."""
    from provisioning.services.simulate import build_snapshot, default_solver

    inputs = inputs or read_inputs()
    if inputs is None:
        return None
    started = time.perf_counter()
    snapshot, notes = build_snapshot(
        inputs.documents, catalog=inputs.catalog, unavailable=inputs.unavailable.__contains__
    )
    built = time.perf_counter()
    plan: Plan = (solve or default_solver())(snapshot)
    solved_at = time.perf_counter()
    # Nothing is launched that THE verifier refuses: a wrong node is worse than none.
    violations = verify(snapshot, plan)
    if violations:
        for violation in violations:
            PLAN_VIOLATIONS.labels(violation.kind).inc()
            log.warning("plan verifier: %s", violation)
        plan = withhold(plan, violations)
    timings = {
        "snapshot": inputs.read_seconds + built - started,
        "solve": solved_at - built,
        "verifier": time.perf_counter() - solved_at,
    }
    return Solved(inputs, plan, notes, timings, violations)


def provision_once(
    solve: Callable | None = None, cluster: Cluster | None = None, prepared: Solved | None = None
) -> Decision | None:
    """Read and solve, or take ``prepared`` when its ``verify_key`` still holds, and record."""
    from provisioning.services.catalog import load_catalog

    solved = None
    if prepared is not None:
        started = time.perf_counter()
        if verify_key() == prepared.inputs.key and load_catalog() is prepared.inputs.catalog:
            # Prepared before the window closed: only this check is on the way to the launch.
            verified = time.perf_counter() - started
            solved = dataclasses.replace(prepared, timings={**prepared.timings, "verify": verified})
        else:
            log.debug("the cluster changed after the run was prepared: solving again")
    if solved is None:
        solved = solve_inputs(solve)
        if solved is None:
            return None
    inputs = solved.inputs
    started = time.perf_counter()
    decision = _record(solved, cluster)
    decision.timings = {
        **{k: round(v, 4) for k, v in solved.timings.items()},
        "record": round(time.perf_counter() - started, 4),
    }
    decision.save(update_fields=["timings"])
    SCHEDULING_DURATION.labels("provisioner").observe(solved.timings["solve"])
    PROVISIONING_DURATION.observe(sum(decision.timings.values()))
    PROVISIONING_PODS.observe(len(inputs.pending))
    _log_decision(decision, solved.plan)
    return decision


def warm_up() -> None:
    """Build what a process's first run would otherwise build while pods wait: the solver's
    modules, the catalog, and each NodePool's instance types and the validator's label
    values (cached on the catalog, so this is cheap once done and again after a refresh)."""
    from provisioning.scheduling import integral, solver  # noqa: F401  (imports the MIP solver too)
    from provisioning.services.catalog import load_catalog
    from provisioning.services.simulate import build_snapshot

    catalog = load_catalog()
    build_snapshot(policy_documents(), catalog=catalog)


def _log_decision(decision: Decision, plan: Plan) -> None:
    """The one line a Decision gets: what went in, what came out, why pods were left over."""
    reasons = Counter(reason[:200] for reason in plan.unschedulable.values())
    types = Counter(c.options[0].instance_type for c in plan.claims if c.options)
    log.info(
        "decision %s: %d pods, %d nodeclaims ($%.4f/h), %d unschedulable, solve %.3fs",
        decision.pk,
        len(decision.pods),
        len(plan.claims),
        plan.total_price,
        len(plan.unschedulable),
        decision.timings["solve"],
        extra={
            "event": "decision",
            "decision": decision.pk,
            "pods": len(decision.pods),
            "nodeclaims": len(plan.claims),
            "instance_types": dict(types.most_common(10)),
            "price_per_hour": round(plan.total_price, 6),
            "unschedulable": len(plan.unschedulable),
            "unschedulable_reasons": dict(reasons.most_common(5)),
            "timings": decision.timings,
        },
    )


def cluster_documents(catalog) -> tuple[list[dict], set[int]]:
    """What the solver needs to know of the cluster, as manifests: the policies, the nodes,
    the NodeClaims in flight (as nodes), the bound pods, and the pods nominated to a claim
    (on the claim, or on its node once registered), so their room stays theirs. Also the
    ids of the pods included: the cluster moves on while it is read, and a pod read as
    pending a moment ago may be among them now."""
    from provisioning.services.reservations import without_claims_launching

    # A reservation's place is taken from the moment a claim plans on it, not from its launch.
    documents = without_claims_launching(policy_documents())
    documents += [{"apiVersion": "v1", "kind": "Node", **n.manifest} for n in ClusterNode.objects.order_by("pk")]
    documents += in_flight_documents(catalog)
    bound = list(ClusterPod.objects.exclude(node_name="").order_by("pk"))
    documents += [pod_manifest(pod) for pod in bound]
    seen = {pod.pk for pod in bound}
    claims = list(NodeClaim.objects.filter(state__in=IN_FLIGHT).values_list("name", flat=True))
    node_of = dict(
        NodeClaim.objects.filter(name__in=nominating_claims()).exclude(node_name="").values_list("name", "node_name")
    )
    for pod in ClusterPod.objects.filter(node_name="", nominated__in=[*claims, *node_of]).order_by("pk"):
        if pod.pk in seen:  # bound by the scheduler between the two reads
            continue
        seen.add(pod.pk)
        manifest = pod_manifest(pod)
        manifest["spec"]["nodeName"] = node_of.get(pod.nominated, pod.nominated)
        documents.append(manifest)
    # The simulated cluster's PodDisruptionBudgets, with their status now (none stored for a real cluster).
    documents += budget_manifests()
    return documents, seen


def policy_documents() -> list[dict]:
    """The policies as manifests: EC2NodeClasses, NodePools and the NodeOverlays laid over
    their instance types."""
    documents: list[dict] = [obj.to_manifest() for obj in EC2NodeClass.objects.order_by("pk")]
    documents += [obj.to_manifest() for obj in NodePool.objects.order_by("pk")]
    documents += [obj.to_manifest() for obj in NodeOverlay.objects.order_by("pk")]
    return documents


def in_flight_documents(catalog) -> list[dict]:
    """NodeClaims not registered yet, as Nodes of their chosen (or cheapest) offering, with the
    labels and taints the simulated kubelet will register them with (the single-valued
    requirements, the template's labels), so the solver fills them before it plans more."""
    documents = []
    for claim in NodeClaim.objects.filter(state__in=IN_FLIGHT).order_by("pk"):
        option = (claim.launch_options or [None])[0]
        if option is None:
            continue
        it = catalog.instance_type(claim.instance_type or option["instanceType"])
        if it is None:
            continue
        it = claim.with_overlay_capacity(it)
        documents.append(
            node_manifest(
                claim.name,
                it,
                zone=claim.zone or option["zone"],
                capacity_type=claim.capacity_type or option["capacityType"],
                nodepool=claim.nodepool_name,
                labels=claim.node_labels(),
                taints=claim.spec.get("taints") or (),
            )
        )
    return documents


def _record(solved: Solved, cluster: Cluster | None = None) -> Decision:
    """The Decision and its NodeClaims, committed and their launches dispatched first: they
    are what the cloud waits on. Then the pods' nominations and reasons, and the events. The
    run's lock is held throughout, so no other run sees the claims without their pods."""
    plan, inputs = solved.plan, solved.inputs
    by_key = {p.key: p for p in [*inputs.displaced, *inputs.pending]}
    with transaction.atomic():
        decision = Decision.objects.create(
            pods=sorted(by_key),
            unschedulable=[{"pod": k, "reason": r} for k, r in sorted(plan.unschedulable.items())],
            catalog_version=f"{inputs.catalog.region} {inputs.catalog.built_at or ''}".strip(),
            total_price_per_hour=Decimal(str(round(plan.total_price, 6))),
            notes=solved.notes[:50],
            unavailable=inputs.unavailable,
            violations=[
                {"kind": v.kind, "nodeClaim": v.node, "pod": v.pod, "message": v.message}
                for v in solved.violations[:200]
            ],
        )
        claims = create_claims(plan.claims, decision=decision)
    recorded: list[ObjectEvent] = []
    with transaction.atomic():
        nominate: dict[str, list[int]] = {}
        for claim, planned in zip(claims, plan.claims, strict=True):
            nominate[claim.name] = [by_key[key].pk for key in planned.pods if key in by_key]
            recorded += [events.nominated(by_key[key], claim.name) for key in planned.pods if key in by_key]
        _nominate(nominate)
        reasons: dict[str, list[int]] = {}
        for key, reason in plan.unschedulable.items():
            pod = by_key.get(key)
            if pod is not None:
                reasons.setdefault(reason[:4000], []).append(pod.pk)
                recorded.append(events.failed_scheduling(pod, reason))
        for reason, pks in reasons.items():
            ClusterPod.objects.filter(pk__in=pks).update(unschedulable_reason=reason)
        # Once committed, so no event names a claim that was rolled back.
        transaction.on_commit(lambda: events.record(recorded, cluster))
    return decision


def _nominate(pods_of: dict[str, list[int]]) -> None:
    """Nominate pods to their claims in one statement; a pod bound meanwhile keeps its node."""
    pods_of = {claim: pks for claim, pks in pods_of.items() if pks}
    if not pods_of:
        return
    ClusterPod.objects.filter(pk__in=[pk for pks in pods_of.values() for pk in pks], node_name="").update(
        nominated=Case(*(When(pk__in=pks, then=Value(claim)) for claim, pks in pods_of.items())),
        unschedulable_reason="",
    )


def create_claims(planned: Sequence[ClaimPlan], *, decision=None, disruption=None) -> list[NodeClaim]:
    """NodeClaim rows for planned claims, launched once committed: those of identical launch
    input together by one fleet, the others each by its own task (``launchbatch``)."""
    from provisioning.services.disruption import drift_hashes_of

    nodepools = {p.name: p for p in NodePool.objects.all()}
    nodeclasses = {c.name: c for c in EC2NodeClass.objects.all()}
    hashes: dict[tuple[str, str], dict[str, str]] = {}

    def hashes_of(nodepool: str, nodeclass: str) -> dict[str, str]:
        if (nodepool, nodeclass) not in hashes:
            hashes[nodepool, nodeclass] = drift_hashes_of(nodepools.get(nodepool), nodeclasses.get(nodeclass))
        return hashes[nodepool, nodeclass]

    claims = [_claim(c, nodepools.get(c.nodepool), decision, disruption, hashes_of) for c in planned]
    _unique_names(claims)
    launches = launchbatch.plan_launches(claims)  # before the insert, which stores their batches
    NodeClaim.objects.bulk_create(claims)
    transaction.on_commit(lambda: launchbatch.dispatch(launches))
    return claims


def _unique_names(claims: Sequence[NodeClaim]) -> None:
    """Three random bytes name a claim; among hundreds at once (a static NodePool scaled up)
    two may draw the same, or one a live claim's: those draw again."""
    taken = set(NodeClaim.objects.filter(name__in=[c.name for c in claims]).values_list("name", flat=True))
    for claim in claims:
        while claim.name in taken:
            claim.name = f"{claim.nodepool_name}-{secrets.token_hex(3)}"
        taken.add(claim.name)


def _claim(planned: ClaimPlan, nodepool: NodePool | None, decision, disruption, hashes_of) -> NodeClaim:
    """The (unsaved) row of a planned claim."""
    template = ((nodepool.spec if nodepool else {}).get("template") or {}).get("spec") or {}
    nodeclass = (template.get("nodeClassRef") or {}).get("name", "")
    spec = {
        "requirements": planned.requirements.to_list(),
        "resources": {"requests": {k: str(v) for k, v in planned.requests.items()}},
        "taints": template.get("taints") or [],
        "startupTaints": template.get("startupTaints") or [],
        "expireAfter": template.get("expireAfter", "720h"),
        **{key: template[key] for key in ("terminationGracePeriod",) if key in template},
        "nodeClassRef": template.get("nodeClassRef") or {},
        "driftHashes": hashes_of(planned.nodepool, nodeclass),
        "labels": dict(planned.labels),
        "annotations": dict(planned.annotations),
    }
    if planned.overlay_capacity:
        # What NodeOverlays add to each option's capacity: a device plugin reports it on a real
        # node; the simulated kubelet (and the next run, while the claim is in flight) adds it.
        spec["overlayCapacity"] = {
            name: {resource: str(amount) for resource, amount in extra.items()}
            for name, extra in planned.overlay_capacity.items()
        }
    return NodeClaim(
        name=f"{planned.nodepool}-{secrets.token_hex(3)}",
        nodepool_name=planned.nodepool,
        nodeclass_name=nodeclass,
        spec=spec,
        launch_options=[option_row(o) for o in planned.options],
        decision=decision,
        disruption=disruption,
        pods=list(planned.pods),
        why=planned.why,
        alternatives=[option_row(o) for o in planned.alternatives],
    )


def option_row(option: InstanceTypeOption) -> dict[str, Any]:
    """An offering a claim compared, as its row keeps it: the effective price, and where
    NodeOverlays changed it, the list price before them (null: none published) and their names."""
    row: dict[str, Any] = {
        "instanceType": option.instance_type,
        "zone": option.zone,
        "capacityType": option.capacity_type,
        "price": option.price,
    }
    if option.reservation_id:
        row["capacityReservationId"] = option.reservation_id
        row["capacityReservationType"] = option.reservation_type or "default"
        row["capacityReservationInterruptible"] = option.reservation_interruptible
    if option.price_overlays:
        row["listPrice"] = option.listed
    if option.overlays:
        row["overlays"] = list(option.overlays)
    return row


# ------------------------------------------------------------------ claims that never came up


def expire_unregistered(timeout_seconds: float | None = None, cloud=None) -> list[str]:
    """Claims launched but not registered within the timeout (default 15 min): terminate
    the instance, delete the claim; their pods are pending again. Claims stuck launching
    (a worker died mid-call) go back to pending, and their relaunch reuses the ClientToken."""
    from provisioning.services.cloud import get_cloud

    timeout = timeout_seconds if timeout_seconds is not None else settings.KARPWEB_REGISTRATION_TIMEOUT_SECONDS
    now = timezone.now()
    expired = []
    overdue = NodeClaim.objects.filter(state=NodeClaim.State.LAUNCHED, launched_at__lt=now - timedelta(seconds=timeout))
    for claim in overdue:
        if claim.move(NodeClaim.State.LAUNCHED, NodeClaim.State.DELETING, reason="RegistrationTimeout"):
            terminate_claim(claim, cloud or get_cloud())
            expired.append(claim.name)
    return expired


def relaunch_stuck(stuck_seconds: float | None = None) -> list[int]:
    """Claims left in LAUNCHING by a worker that died: back to PENDING, to launch again; a
    batch's claims as their batch, whose token finds what the dead worker launched."""
    jobs = dispatcher()
    seconds = stuck_seconds if stuck_seconds is not None else settings.KARPWEB_LAUNCH_STUCK_SECONDS
    cutoff = timezone.now() - timedelta(seconds=seconds)
    again = []
    batches = set()
    for claim in NodeClaim.objects.filter(state=NodeClaim.State.LAUNCHING, launch_started_at__lt=cutoff):
        if claim.move(NodeClaim.State.LAUNCHING, NodeClaim.State.PENDING):
            if claim.launch_batch:
                batches.add(claim.launch_batch)
            else:
                jobs.launch_claim(claim.pk)
            again.append(claim.pk)
    for token in sorted(batches):
        jobs.launch_batch(token)
    return again


def terminate_claim(claim: NodeClaim, cloud) -> None:
    """Terminate the claim's instance, delete its node; its pods go back to pending."""
    from provisioning.cluster import get_cluster

    if claim.instance_id:
        with cloud_call("nodeclaim.termination", "Delete"):
            cloud.terminate(claim.instance_id)
        reservation = claim.node_labels().get("karpenter.k8s.aws/capacity-reservation-id")
        if reservation and claim.capacity_type == "reserved" and claim.state != NodeClaim.State.TERMINATED:
            from provisioning.services import reservations

            reservations.mark_terminated(reservation)
    if claim.node_name:
        get_cluster().delete_node(claim.node_name)
    ClusterPod.objects.filter(nominated=claim.name, node_name="").update(nominated="")
    claim.move(
        (NodeClaim.State.DELETING, *NodeClaim.ACTIVE_STATES), NodeClaim.State.TERMINATED, deleted_at=timezone.now()
    )
