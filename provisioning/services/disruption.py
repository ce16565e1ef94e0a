"""Disruption: every 10 s, plan with the pure planners (``provisioning.disruption``), and
carry each command through its steps.

    planned ──15 s, re-planned against fresh state──▶ replacing ──replacements Ready──▶
    draining (taint karpenter.sh/disrupted, cordon, evict through PDBs) ──empty──▶
    terminated in EC2 ──▶ done;   or cancelled when the re-check no longer finds it.

One command is in progress at a time, as upstream; expiration is forceful (no replacement
first, no budget). Every step is recorded on the ``Disruption`` row with its reason and
savings, for the dashboard; every node left alone gets a sentence saying why.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from provisioning.cluster import get_cluster
from provisioning.cluster.base import DISRUPTED_TAINT, DO_NOT_DISRUPT
from provisioning.disruption import planner
from provisioning.disruption.model import Candidate, Command, PoolPolicy
from provisioning.models import ClusterNode, ClusterPod, Disruption, EC2NodeClass, NodeClaim, NodePool
from provisioning.scheduling.labelselector import LabelSelector
from provisioning.services import events

log = logging.getLogger(__name__)

VALIDATION_DELAY = timedelta(seconds=15)  # upstream re-checks a command 15 s after planning it
ACTIVE = (Disruption.State.PLANNED, Disruption.State.REPLACING, Disruption.State.DRAINING)


def template_hash(spec: dict[str, Any]) -> str:
    """What drift compares: a hash of the NodePool's template (or EC2NodeClass's spec)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def drift_hashes(nodepool: str, nodeclass: str) -> dict[str, str]:
    """The hashes a new NodeClaim records, to be compared later."""
    return drift_hashes_of(
        NodePool.objects.filter(name=nodepool).first(), EC2NodeClass.objects.filter(name=nodeclass).first()
    )


def drift_hashes_of(pool: NodePool | None, nc: EC2NodeClass | None) -> dict[str, str]:
    """:func:`drift_hashes` of policies already read."""
    return {
        "nodepool": template_hash((pool.spec if pool else {}).get("template") or {}),
        "nodeclass": template_hash(nc.spec if nc else {}),
    }


# ------------------------------------------------------------------ one round


def run(now=None) -> Disruption | None:
    """One disruption round: advance the command in progress, or plan a new one."""
    now = now or timezone.now()
    current = Disruption.objects.filter(state__in=ACTIVE).order_by("planned_at").first()
    if current is not None:
        advance(current, now)
        return current
    result = plan(now)
    command = next(iter(result.commands), None)
    if command is None:
        return None
    return _record(command, now)


def plan(now=None, recheck: Disruption | None = None):
    """The planners' view of the cluster now; also writes each node's note for the dashboard.

    ``recheck``: a planned command being validated. Only its nodes may be chosen then (the
    others still count for budgets and still take pods), so the question the planners answer
    is "can these nodes still go, this way?", not "are they still the first choice?"."""
    now = now or timezone.now()
    candidates, snapshot = _picture(now, recheck)
    if recheck is not None:
        planned = set(recheck.nodes)
        candidates = [
            c
            if c.name in planned or c.blocked_by
            else replace(c, blocked_by="not part of the command being re-checked")
            for c in candidates
        ]
        return planner.plan(
            candidates, _policies(), snapshot, now.timestamp(), spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION
        )
    result = planner.plan(
        candidates,
        _policies(),
        snapshot,
        now.timestamp(),
        spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION,
    )
    in_command = {name for c in result.commands for name in c.candidates}
    for name, why in result.not_candidates.items():
        ClusterNode.objects.filter(name=name).exclude(disruption_note=why).update(disruption_note=why[:2000])
    ClusterNode.objects.filter(name__in=in_command).update(disruption_note="chosen for disruption")
    why_blocked = {c.name: c.blocked_by for c in candidates if c.blocked_by}
    nodes = ClusterNode.objects.filter(name__in=why_blocked)
    events.record([events.blocked(node, why_blocked[node.name]) for node in nodes], get_cluster())
    return result


def _policies() -> dict[str, PoolPolicy]:
    policies = {p.name: _policy(p) for p in NodePool.objects.all()}
    return {name: policy for name, policy in policies.items() if policy is not None}


def _policy(pool: NodePool) -> PoolPolicy | None:
    try:
        return PoolPolicy.from_spec(pool.name, pool.spec)
    except ValueError as exc:  # the validator lets nothing through that fails here
        log.warning("NodePool %s: disruption settings unreadable: %s", pool.name, exc)
        return None


def _picture(now, recheck: Disruption | None = None) -> tuple[list[Candidate], Any]:
    """Candidates (managed nodes with their pods) and the cluster as a solver snapshot."""
    from provisioning.services.catalog import load_catalog
    from provisioning.services.provision import cluster_documents
    from provisioning.services.simulate import build_snapshot

    nodes = list(ClusterNode.objects.all())
    bound = list(ClusterPod.objects.exclude(node_name=""))
    catalog = load_catalog()
    snapshot, _ = build_snapshot(cluster_documents(catalog)[0], catalog=catalog)
    snapshot = type(snapshot)(
        pods=(), nodepools=snapshot.nodepools, nodes=snapshot.nodes, daemonsets=snapshot.daemonsets
    )
    pods_of: dict[str, list] = {}
    for node in snapshot.nodes:
        pods_of[node.name] = [p for p in node.pods if not p.is_daemonset]
    claims = {c.name: c for c in NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES)}
    active = Disruption.objects.filter(state__in=ACTIVE)
    if recheck is not None:
        active = active.exclude(pk=recheck.pk)
    disrupting = {n for d in active for n in d.nodes}
    pools = {p.name: p for p in NodePool.objects.all()}
    nodeclasses = {c.name: c for c in EC2NodeClass.objects.all()}
    annotated = {p.key: p for p in bound}
    budgets = _pdbs()
    candidates = []
    for node in nodes:
        claim = claims.get(node.nodeclaim)
        if claim is None:
            continue  # not ours: Karpenter disrupts only the nodes it launched
        pods = tuple(pods_of.get(node.name, ()))
        changed = node.last_pod_change_at or claim.initialized_at or claim.created_at
        blocked = _blocked(node, [annotated.get(p.key) for p in pods], budgets)
        candidates.append(
            Candidate(
                name=node.name,
                nodeclaim=claim.name,
                nodepool=claim.nodepool_name,
                instance_type=claim.instance_type,
                capacity_type=claim.capacity_type,
                zone=claim.zone,
                price_per_hour=float(claim.price_per_hour or 0),
                created_at=claim.created_at.timestamp(),
                initialized=claim.state == NodeClaim.State.INITIALIZED,
                pods=pods,
                last_pod_change_at=changed.timestamp(),
                drift_reason=_drift(claim, pools.get(claim.nodepool_name), nodeclasses.get(claim.nodeclass_name)),
                blocked_by=blocked,
                blocked_by_pods_only=blocked is not None and _blocked(node, [], budgets) is None,
                disrupting=node.name in disrupting,
            )
        )
    return candidates, snapshot


def _drift(claim: NodeClaim, pool: NodePool | None, nodeclass: EC2NodeClass | None) -> str | None:
    recorded = claim.spec.get("driftHashes") or {}
    if (
        pool is not None
        and recorded.get("nodepool")
        and recorded["nodepool"] != template_hash(pool.spec.get("template") or {})
    ):
        return f"NodePool {pool.name}'s template changed since the node was launched"
    if nodeclass is not None and recorded.get("nodeclass") and recorded["nodeclass"] != template_hash(nodeclass.spec):
        return f"EC2NodeClass {nodeclass.name} changed since the node was launched"
    return None


def _pdbs() -> list[tuple[str, str, LabelSelector, int]]:
    """PodDisruptionBudgets that allow no eviction now: (namespace, name, selector, allowed)."""
    out = []
    try:
        budgets = get_cluster().pdbs()
    except Exception as exc:  # an unreachable cluster: plan without, evictions still ask
        log.warning("disruption: cannot list PodDisruptionBudgets (%s)", exc)
        return out
    for pdb in budgets:
        meta, spec = pdb.get("metadata") or {}, pdb.get("spec") or {}
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed", 0) or 0)
        if allowed > 0:
            continue
        try:
            selector = LabelSelector.from_manifest(spec.get("selector") or {}, "spec.selector")
        except Exception:
            continue
        out.append((meta.get("namespace") or "default", meta.get("name", ""), selector, allowed))
    return out


def _blocked(node: ClusterNode, pods: list[ClusterPod | None], pdbs=()) -> str | None:
    annotations = (node.manifest.get("metadata") or {}).get("annotations") or {}
    if annotations.get(DO_NOT_DISRUPT) == "true":
        return f"the node has the {DO_NOT_DISRUPT} annotation"
    for pod in pods:
        if pod is None:
            continue
        metadata = pod.manifest.get("metadata") or {}
        if (metadata.get("annotations") or {}).get(DO_NOT_DISRUPT) == "true":
            return f"pod {pod.key} has the {DO_NOT_DISRUPT} annotation"
        labels = metadata.get("labels") or {}
        for namespace, name, selector, _ in pdbs:
            # An empty selector in policy/v1 selects every pod of the namespace.
            if namespace == pod.namespace and selector.matches(labels):
                return f"PodDisruptionBudget {namespace}/{name} allows no disruption of pod {pod.key} now"
    return None


def _grace_seconds(node: ClusterNode) -> float | None:
    pool = NodePool.objects.filter(name=node.nodepool).first()
    policy = _policy(pool) if pool is not None else None
    return policy.termination_grace_period_seconds if policy is not None else None


def _record(command: Command, now) -> Disruption:
    claims = list(ClusterNode.objects.filter(name__in=command.candidates).values_list("nodeclaim", flat=True))
    disruption = Disruption.objects.create(
        reason=command.reason,
        nodes=list(command.candidates),
        nodeclaims=claims,
        replacement_plan=[
            {
                "instanceType": c.options[0].instance_type,
                "capacityType": c.options[0].capacity_type,
                "price": c.options[0].price,
                "options": len(c.options),
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
            "nodes": list(command.candidates),
            "nodeclaims": claims,
            "replacements": [r["instanceType"] for r in disruption.replacement_plan],
            "savings_per_hour": round(command.savings_per_hour, 6),
            "explanation": command.explanation,
            "forceful": command.forceful,
        },
    )
    if command.forceful:  # expiration: no waiting, no replacement first
        _start(disruption, command, now)
    return disruption


# ------------------------------------------------------------------ the steps


def advance(disruption: Disruption, now) -> None:
    if disruption.state == Disruption.State.PLANNED:
        if now - disruption.planned_at < VALIDATION_DELAY:
            return
        fresh = plan(now, recheck=disruption)
        same = next((c for c in fresh.commands if _still_valid(disruption, c)), None)
        if same is None:
            why = "no longer valid when re-checked 15 s later"
            if disruption.move(Disruption.State.PLANNED, Disruption.State.CANCELLED, message=why, finished_at=now):
                _log_step(disruption, "cancelled", why)
            return
        _start(disruption, same, now)
    elif disruption.state == Disruption.State.REPLACING:
        replacements = list(disruption.replacements.all())
        if any(c.state in (NodeClaim.State.FAILED, NodeClaim.State.TERMINATED) for c in replacements):
            if disruption.move(
                Disruption.State.REPLACING,
                Disruption.State.CANCELLED,
                message="a replacement failed to launch",
                finished_at=now,
            ):
                _log_step(disruption, "cancelled", "a replacement failed to launch")
            return
        waiting = [c for c in replacements if c.state != NodeClaim.State.INITIALIZED]
        if waiting:
            events.record([events.waiting_readiness(c) for c in waiting], get_cluster())
        else:
            disruption.move(Disruption.State.REPLACING, Disruption.State.DRAINING)
            _drain(disruption, now)
    elif disruption.state == Disruption.State.DRAINING:
        _drain(disruption, now)


def _still_valid(disruption: Disruption, command: Command) -> bool:
    """The fresh plan still makes this command: the same nodes for the same reason, or, for
    emptiness, a larger set of empty nodes that includes them (deleting a subset of empty
    nodes is as good)."""
    if command.reason != disruption.reason:
        return False
    planned, fresh = set(disruption.nodes), set(command.candidates)
    return planned == fresh or (disruption.reason == "Empty" and planned <= fresh)


def _start(disruption: Disruption, command: Command, now) -> None:
    """Launch the replacements (if any) before touching the old nodes."""
    from provisioning.services.provision import create_claims

    if command.replacements:
        with transaction.atomic():
            if not disruption.move(Disruption.State.PLANNED, Disruption.State.REPLACING):
                return
            claims = create_claims(command.replacements, disruption=disruption)
        events.record([events.launching(claim, disruption.reason) for claim in claims], get_cluster())
        return
    if disruption.move(Disruption.State.PLANNED, Disruption.State.DRAINING):
        _drain(disruption, now)


def _drain(disruption: Disruption, now) -> None:
    """Taint and cordon, evict what is left (a PDB may refuse: try again next round), and
    terminate each node once it is empty."""
    from provisioning.services.cloud import get_cloud
    from provisioning.services.provision import terminate_claim

    cluster = get_cluster()
    done = True
    for name in disruption.nodes:
        node = ClusterNode.objects.filter(name=name).first()
        if node is None:
            continue
        events.record(events.terminating(node, disruption.reason), cluster)
        cluster.taint(name, DISRUPTED_TAINT)
        cluster.cordon(name)
        refused = [
            pod.key for pod in ClusterPod.objects.filter(node_name=name) if not cluster.evict(pod.namespace, pod.name)
        ]
        grace = _grace_seconds(node)
        if refused and grace is not None and (now - disruption.planned_at).total_seconds() > grace:
            # terminationGracePeriod elapsed: the node goes, PDBs or not (as upstream).
            disruption.message = f"terminationGracePeriod ({grace:g} s) elapsed: {len(refused)} pods deleted"
            disruption.save(update_fields=["message"])
            refused = []
        if refused:
            done = False
            disruption.message = f"waiting: eviction of {', '.join(refused[:3])} refused by a PodDisruptionBudget"
            disruption.save(update_fields=["message"])
            continue
        claim = NodeClaim.objects.filter(name=node.nodeclaim).first()
        if claim is not None and claim.move(
            NodeClaim.ACTIVE_STATES, NodeClaim.State.DELETING, reason=disruption.reason
        ):
            terminate_claim(claim, get_cloud())
        else:
            cluster.delete_node(name)
    if done and disruption.move(Disruption.State.DRAINING, Disruption.State.DONE, finished_at=now, message=""):
        _log_step(disruption, "done", "its nodes are terminated")


def _log_step(disruption: Disruption, state: str, why: str) -> None:
    """A later step of a disruption already logged in full when it was planned: the id says which."""
    log.info(
        "disruption %s %s: %s",
        disruption.pk,
        state,
        why,
        extra={"event": f"disruption.{state}", "disruption": disruption.pk, "reason": disruption.reason},
    )
