"""A real cluster mirrored into the database (``KARPWEB_CLUSTER=kubernetes``).

``manage.py cluster_watch`` lists and watches Pods, Nodes, NodePools, EC2NodeClasses and
NodeOverlays and hands every event to ``handle``:

* a pod the scheduler marked unschedulable (``base.is_pending``) becomes a pending
  ``ClusterPod`` and opens the batch window; a bound pod is stored with its node; other pods
  (just created, DaemonSet pods not placed yet) are not the provisioner's;
* a Node is stored, and a Node whose providerID is a launched NodeClaim's instance registers
  that claim (Initialized once Ready without the startup taints);
* NodePool, EC2NodeClass and NodeOverlay changes go through ``crdsync.import_event`` (THE
  validator, the audit log, never a lost update).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from provisioning.cluster.base import Event, Manifest, is_pending
from provisioning.models import ClusterNode, ClusterPod, NodeClaim
from provisioning.services.dispatch import dispatcher

log = logging.getLogger(__name__)


def handle(event: Event) -> Any:
    if event.kind == "Pod":
        return _pod(event)
    if event.kind == "Node":
        return _node(event)
    if event.kind in ("NodePool", "EC2NodeClass", "NodeOverlay"):
        from provisioning.services import crdsync

        result = crdsync.import_event(event)
        if result.conflict or result.action == "invalid":
            log.warning("%s %s from the cluster: %s", event.kind, _name(event.object), result)
        return result
    return None


def _name(manifest: Manifest) -> str:
    return (manifest.get("metadata") or {}).get("name", "")


def _pod(event: Event) -> bool:
    manifest = event.object
    meta = manifest.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name", "")
    node = (manifest.get("spec") or {}).get("nodeName") or ""
    phase = (manifest.get("status") or {}).get("phase")
    if event.type == "DELETED" or phase in ("Succeeded", "Failed") or not (node or is_pending(manifest)):
        gone = ClusterPod.objects.filter(namespace=namespace, name=name)
        bound_to = gone.values_list("node_name", flat=True).first()
        gone.delete()
        if bound_to:
            ClusterNode.objects.filter(name=bound_to).update(last_pod_change_at=timezone.now())
        return False
    owner = next(iter(meta.get("ownerReferences") or []), None)
    defaults = {
        "manifest": manifest,
        "node_name": node,
        "phase": ClusterPod.Phase.RUNNING if node else ClusterPod.Phase.PENDING,
        "owner": f"{owner['kind']}/{owner['name']}" if owner else "",
        **ClusterPod.request_columns(manifest),
    }
    if node:
        defaults["nominated"] = ""
    with transaction.atomic():
        previous = ClusterPod.objects.filter(namespace=namespace, name=name).values_list("node_name", flat=True).first()
        ClusterPod.objects.update_or_create(namespace=namespace, name=name, defaults=defaults)
        if node and previous != node:
            ClusterNode.objects.filter(name=node).update(last_pod_change_at=timezone.now())
            ClusterPod.objects.filter(namespace=namespace, name=name).update(bound_at=timezone.now())
    if not node:
        dispatcher().pods_pending()
    return True


def _node(event: Event) -> bool:
    manifest = event.object
    name = _name(manifest)
    if event.type == "DELETED":
        ClusterNode.objects.filter(name=name).delete()
        ClusterPod.objects.filter(node_name=name).update(
            node_name="", phase=ClusterPod.Phase.PENDING, nominated="", bound_at=None
        )
        return False
    labels = (manifest.get("metadata") or {}).get("labels") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (manifest.get("status") or {}).get("conditions") or ()
    )
    instance_id = ((manifest.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]
    claim = NodeClaim.objects.filter(instance_id=instance_id).first() if instance_id.startswith("i-") else None
    ClusterNode.objects.update_or_create(
        name=name,
        defaults={
            "manifest": manifest,
            "ready": ready,
            "instance_id": instance_id if instance_id.startswith("i-") else "",
            "nodeclaim": claim.name if claim else "",
            "nodepool": labels.get("karpenter.sh/nodepool", ""),
        },
    )
    if claim is not None:
        _register(claim, name, manifest, ready)
    return True


def _register(claim: NodeClaim, node: str, manifest: Manifest, ready: bool) -> None:
    now = timezone.now()
    if claim.state == NodeClaim.State.LAUNCHED:
        claim.move(NodeClaim.State.LAUNCHED, NodeClaim.State.REGISTERED, node_name=node, registered_at=now)
        ClusterNode.objects.filter(name=node).update(last_pod_change_at=now)
    startup = {(t.get("key"), t.get("effect")) for t in claim.spec.get("startupTaints") or ()}
    present = {(t.get("key"), t.get("effect")) for t in (manifest.get("spec") or {}).get("taints") or ()}
    if claim.state == NodeClaim.State.REGISTERED and ready and not (startup & present):
        claim.move(NodeClaim.State.REGISTERED, NodeClaim.State.INITIALIZED, initialized_at=now)
