"""Celery tasks: thin wrappers over the services, with JSON arguments and results."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_ready

from provisioning.cloud.base import CloudError, Throttled
from provisioning.cluster.base import ClusterError
from provisioning.services import dispatch

log = logging.getLogger(__name__)

DISRUPTION_LOCK = "karpweb:disruption:lock"
ALLOCATION_LOCK = "karpweb:spend:allocation:lock"


@shared_task(
    name="provisioning.tasks.refresh_catalog",
    autoretry_for=(CloudError,),
    retry_backoff=60,
    retry_backoff_max=30 * 60,
    retry_jitter=True,
    max_retries=5,
)
def refresh_catalog(region: str | None = None) -> dict[str, Any]:
    """Rebuild the catalog (instance types, zones, prices) from the cloud and share it with
    every process; runs every 12 h (CELERY_BEAT_SCHEDULE). EC2 failures are retried with
    backoff and the last catalog stays in use meanwhile."""
    from provisioning.services import catalog

    built = catalog.refresh_catalog(region)
    return {
        "region": built.region,
        "instanceTypes": len(built),
        "prices": built.price_source,
        "pricesAsOf": built.prices_as_of,
        "spotPrices": built.spot_source,
        "fallbackReason": built.fallback_reason,
        "builtAt": built.built_at,
    }


# Launches retry throttling and cluster errors with backoff, and are acknowledged only when
# done, so a worker stopped mid-launch hands the task to another (the ClientToken keeps that
# from starting a second instance).
LAUNCH_RETRIES: dict[str, Any] = {
    "autoretry_for": (Throttled, ClusterError),
    "retry_backoff": True,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 8,
    "acks_late": True,
}


@shared_task(name="provisioning.tasks.launch_nodeclaim", **LAUNCH_RETRIES)
def launch_nodeclaim(claim_id: int) -> dict[str, Any]:
    """Launch one NodeClaim; throttling retries with backoff, the ClientToken (the claim's
    uid) keeps a redelivered message from starting a second instance."""
    from django.conf import settings

    from provisioning.models import NodeClaim
    from provisioning.services import cloud

    if settings.KARPWEB_CLUSTER == "kubernetes":
        _publish_nodeclaims(NodeClaim.objects.filter(pk=claim_id))
    claim = cloud.launch_nodeclaim(claim_id)
    if claim is None:
        return {"claim": claim_id, "skipped": "not pending"}
    return {"claim": claim.name, "state": claim.state, "instance": claim.instance_id, "reason": claim.reason}


@shared_task(name="provisioning.tasks.launch_nodeclaims", **LAUNCH_RETRIES)
def launch_nodeclaims(batch: str) -> dict[str, Any]:
    """Launch a batch of NodeClaims of identical launch input with one fleet; throttling
    retries with backoff, the batch's token (its ClientToken and instance tag) keeps a
    redelivered message from starting a second set of instances."""
    from django.conf import settings

    from provisioning.models import NodeClaim
    from provisioning.services import launchbatch

    if settings.KARPWEB_CLUSTER == "kubernetes":
        _publish_nodeclaims(NodeClaim.objects.filter(launch_batch=batch))
    claims = launchbatch.launch_batch(batch)
    return {
        "batch": batch,
        "claims": {c.name: {"state": c.state, "instance": c.instance_id} for c in claims},
    }


def _publish_nodeclaims(claims: Any) -> None:
    """Create the pending NodeClaim objects in the cluster (idempotent) before launching."""
    from provisioning.cluster import get_cluster
    from provisioning.models import NodeClaim

    cluster = get_cluster()
    for claim in claims.filter(state=NodeClaim.State.PENDING):
        cluster.create_nodeclaim(claim.to_manifest())


@shared_task(name="provisioning.tasks.resolve_nodeclasses")
def resolve_nodeclasses() -> dict[str, bool]:
    """Resolve every EC2NodeClass's selectors and report readiness on its status."""
    from provisioning.models import EC2NodeClass
    from provisioning.services import cloud

    return {nc.name: cloud.resolve_nodeclass(nc).ready for nc in EC2NodeClass.objects.all()}


@shared_task(name="provisioning.tasks.capacity_reservations", ignore_result=True)
def capacity_reservations() -> dict[str, list[str]]:
    """Nodes that left their capacity reservation relabelled on-demand; nodes of Capacity
    Blocks about to end drained."""
    from provisioning.services import reservations

    return {
        "demoted": reservations.demote_left_reservations(),
        "drained": reservations.drain_expiring_capacity_blocks(),
    }


@shared_task(name="provisioning.tasks.refresh_nodeoverlays")
def refresh_nodeoverlays() -> dict[str, bool]:
    """Say on each NodeOverlay's status whether it is applied or left out for a conflict."""
    from provisioning.services import overlays

    return overlays.refresh_status()


@shared_task(name="provisioning.tasks.collect_garbage")
def collect_garbage() -> list[str]:
    """Terminate instances of this cluster that no NodeClaim owns (older than 30 s)."""
    from provisioning.services import cloud

    return cloud.collect_garbage()


# ------------------------------------------------------------------ provisioning


def pods_pending() -> None:
    """Pending pods were seen: open or extend the batch window; the caller that opens it
    schedules the window's check."""
    from provisioning.services import provision

    if provision.note_pending():
        batch_window.apply_async(countdown=provision.idle_seconds() - provision.lookahead_seconds())


@shared_task(name="provisioning.tasks.batch_window", ignore_result=True)
def batch_window() -> dict[str, Any]:
    """Close the batch window when it is due (1 s idle or 10 s in all) and provision; the
    run is prepared in the window's last ``KARPWEB_BATCH_LOOKAHEAD_SECONDS``."""
    from provisioning.services import provision as service

    wait, ahead = service.window_wait(), service.lookahead_seconds()
    if wait > ahead:
        batch_window.apply_async(countdown=wait - ahead)
        return {"wait": wait}
    again, decision = service.provision_at_close()
    if again > 0:  # new pods pushed the close back, or another run is recording
        batch_window.apply_async(countdown=again)
        return {"wait": again}
    return _decision_summary(decision)


@shared_task(name="provisioning.tasks.provision")
def provision() -> dict[str, Any]:
    """One provisioning run over every pending pod (single: a Redis lock)."""
    from provisioning.services import provision as service

    return _decision_summary(service.provision())


def _decision_summary(decision: Any) -> dict[str, Any]:
    if decision is None:
        return {"decision": None}
    return {
        "decision": decision.pk,
        "nodeclaims": decision.claims.count(),
        "unschedulable": len(decision.unschedulable),
    }


@shared_task(name="provisioning.tasks.sweep_pending", ignore_result=True)
def sweep_pending() -> bool:
    """Pending pods nobody is provisioning for (a window lost with Redis, a missed event)
    open a window again."""
    from provisioning.services import provision as service

    if service.window_open():
        return False  # a window is open: it will see every pending pod when it closes
    if service.pending_pods().filter(unschedulable_reason="").exists() or _unplanned_since_last_decision():
        pods_pending()
        return True
    return False


def _unplanned_since_last_decision() -> bool:
    """Pods that arrived after the last decision and are still waiting."""
    from provisioning.models import Decision
    from provisioning.services import provision as service

    last = Decision.objects.order_by("-started_at").values_list("started_at", flat=True).first()
    pending = service.pending_pods()
    return pending.exists() if last is None else pending.filter(created_at__gt=last).exists()


@shared_task(name="provisioning.tasks.nodeclaim_lifecycle", ignore_result=True)
def nodeclaim_lifecycle() -> dict[str, Any]:
    """Registration timeouts (terminate, pods pending again) and claims a dead worker left
    launching (launched again, idempotently)."""
    from provisioning.services import provision as service

    return {"expired": service.expire_unregistered(), "relaunched": service.relaunch_stuck()}


@shared_task(name="provisioning.tasks.sim_tick", ignore_result=True)
def sim_tick() -> dict[str, Any]:
    """The simulated kubelet (launched claims become Ready nodes) and scheduler (pending
    pods bind to nodes that fit)."""
    from django.conf import settings

    from provisioning.cluster import simulated
    from provisioning.services.catalog import load_catalog
    from provisioning.services.connections import get_redis
    from provisioning.services.simulate import default_solver

    # One tick at a time: a slow tick (many pods) must not race the next one.
    lock = get_redis().lock("karpweb:sim:tick", timeout=60, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return {"skipped": "another tick is running"}
    try:
        catalog = load_catalog()
        registered = simulated.register_launched(settings.KARPWEB_SIM_KUBELET_DELAY_SECONDS, catalog.instance_type)
        bound = simulated.bind_pending(default_solver())
    finally:
        lock.release()
    return {"registered": registered, "bound": bound}


@shared_task(name="provisioning.tasks.demo_workload", ignore_result=True)
def demo_workload() -> dict[str, int]:
    from django.conf import settings

    from provisioning.services import demo
    from provisioning.services.connections import get_redis

    replicas = demo.step()
    pods_pending()
    if settings.KARPWEB_AWS == "simulated" and settings.KARPWEB_INTERRUPTION_QUEUE:
        demo.interrupt_now_and_then(get_redis())
    return replicas


@shared_task(
    name="provisioning.tasks.export_policy",
    autoretry_for=(Exception,),
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=10,
)
def export_policy(kind: str, name: str) -> str:
    """Push a NodePool or EC2NodeClass edited here (browser, REST, CLI) to the real cluster."""
    from provisioning.cluster import get_cluster
    from provisioning.services import crdsync

    return str(crdsync.export_change(kind, name, get_cluster()))


@shared_task(name="provisioning.tasks.disrupt", ignore_result=True)
def disrupt() -> dict[str, Any]:
    """One disruption round (every 10 s): advance the command in progress or plan one."""
    from provisioning.services import disruption as service
    from provisioning.services.connections import get_redis

    # One round at a time whatever the number of workers: a round that outlasts the beat's
    # 10 s must not let a second one plan another command beside it.
    lock = get_redis().lock(DISRUPTION_LOCK, timeout=300, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return {"skipped": "another disruption round is running"}
    try:
        current = service.run()
    finally:
        lock.release()
    return {"disruption": current.pk if current else None, "state": current.state if current else None}


@shared_task(name="provisioning.tasks.static_capacity", ignore_result=True)
def static_capacity() -> dict[str, Any]:
    """Static NodePools to their replicas (every 10 s): create or remove NodeClaims."""
    from provisioning.services import static as service
    from provisioning.services.connections import get_redis

    # One at a time: two reconciles counting the same claims would both create the missing ones.
    lock = get_redis().lock(service.LOCK, timeout=120, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return {"skipped": "another static reconcile is running"}
    try:
        outcomes = service.reconcile()
    finally:
        lock.release()
    return {"nodepools": [o.as_dict() for o in outcomes]}


@shared_task(name="provisioning.tasks.record_allocation", ignore_result=True)
def record_allocation() -> dict[str, Any]:
    """Split the running nodes' cost over their pods and add it to the allocation record
    (every KARPWEB_SPEND_SAMPLE_SECONDS): spend per namespace and per team."""
    from provisioning.services import allocation
    from provisioning.services.connections import get_redis

    # One sample at a time: two at once would both count the time since the last one.
    lock = get_redis().lock(ALLOCATION_LOCK, timeout=120, blocking_timeout=0)
    if not lock.acquire(blocking=False):
        return {"skipped": "another sample is being recorded"}
    try:
        sample = allocation.record()
    finally:
        lock.release()
    return {"nodes": sample.nodes, "pods": sample.pods, "perHour": round(sample.per_hour, 6), "seconds": sample.seconds}


@shared_task(name="provisioning.tasks.instance_status", ignore_result=True)
def instance_status() -> dict[str, Any]:
    """DescribeInstanceStatus (every minute): broken instances and scheduled events."""
    from provisioning.services import interruption

    return {"unhealthy": [row.instance_id for row in interruption.check_instance_status()]}


@shared_task(name="provisioning.tasks.repair_nodes", ignore_result=True)
def repair_nodes() -> dict[str, Any]:
    """Node repair (every 30 s): nodes unhealthy past their policy's toleration."""
    from provisioning.services import repair

    return {"repaired": [row.node for row in repair.repair()]}


@worker_ready.connect
def _warm_up(sender: Any = None, **kwargs: Any) -> None:
    # Beat's first 12-hourly refresh would come 12 h after start: refresh now instead, and
    # report EC2NodeClass readiness without waiting a minute.
    refresh_catalog.delay()
    resolve_nodeclasses.delay()


# How often a pool process checks that its catalog and instance types are built.
KEEP_WARM_SECONDS = 5.0


@worker_process_init.connect
def _keep_warm(sender: Any = None, **kwargs: Any) -> None:
    """Each pool process keeps, in the background, what its first provisioning run or launch
    would otherwise build while a burst waits: the catalog and the NodePools' instance types
    (0.3 s for a region), and their EC2NodeClasses resolved, instance type facts and launch
    templates (a first launch made 5 EC2 calls before its CreateFleet). Upstream keeps the
    same things cached."""
    threading.Thread(target=_warm_loop, name="karpweb-keep-warm", daemon=True).start()


def _warm_loop() -> None:
    import time

    from django.db import connection

    from provisioning.services import cloud
    from provisioning.services import provision as service

    while True:
        try:
            service.warm_up()
            cloud.warm_launches()
        except Exception as exc:  # the database, Redis or the cloud away now: the runs will say so
            log.debug("keeping warm: %s", exc)
        finally:
            connection.close()  # this thread's own; not held between passes
        time.sleep(KEEP_WARM_SECONDS)


class _Celery:
    """Services' dispatcher (``provisioning.services.dispatch``): each job a Celery task."""

    def launch_claim(self, claim_id: int) -> None:
        launch_nodeclaim.delay(claim_id)

    def launch_batch(self, token: str) -> None:
        launch_nodeclaims.delay(token)

    def pods_pending(self) -> None:
        pods_pending()

    def export_policy(self, kind: str, name: str) -> None:
        export_policy.delay(kind, name)


dispatch.install(_Celery())
