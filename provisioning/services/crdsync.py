"""Two-way sync of NodePools, EC2NodeClasses and NodeOverlays between the database and the cluster.

A ``kubectl apply`` reaches the database through the watch (:func:`import_event`); an edit in
the browser or over REST reaches the cluster through :func:`export_change`;
:func:`reconcile` settles both sides at start-up. Every database write goes through
``policy.apply_manifest`` / ``policy.delete_resource`` (one validator, one audit trail), and
the cluster is reached only through the ``list_custom`` / ``apply_custom`` / ``delete_custom``
calls of ``KubernetesCluster``.

Neither side ever overwrites a change it has not seen. What makes that decidable is the sync
point kept on each database row, in ``status["karpwebSync"]``:

* ``clusterResourceVersion``: the cluster's version of the object when the two last agreed,
  sent as the precondition of the next replace (the API server answers 409 if it moved on),
  and ``clusterUid``, which tells that object from a later one of the same name;
* ``syncedDigest``: a digest of what a person edits (labels, annotations, spec) at that
  moment, the common ancestor of a three-way comparison: the side whose digest still equals
  it has not changed, so the other side's change can be taken; when both differ from it and
  from each other, both were edited, and the result is a conflict carrying both versions.

It lives in ``status`` because status is observed state, not desired state: it is never
written to the cluster, an edit that omits status keeps it, and it leaves the digests alone.
Notes that only move the sync point are written without an audit entry or a new
resourceVersion, so they neither clutter the audit log nor turn a person's pending form
into a spurious conflict.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from provisioning import crd
from provisioning.cluster.base import Conflict as ClusterConflict
from provisioning.cluster.base import Event, Manifest
from provisioning.models import RESOURCE_MODELS, AuditEntry, CustomResource
from provisioning.services import policy

log = logging.getLogger(__name__)

SOURCE = AuditEntry.Source.KUBECTL
SYNC = "karpwebSync"
# EC2NodeClasses first: a NodePool created before the class it names is not Ready.
SYNC_ORDER = ("EC2NodeClass", "NodePool", "NodeOverlay")
# How often an export retries when the cluster's object moved on without a change of content
# (a controller writing status bumps resourceVersion too).
EXPORT_ATTEMPTS = 3

CREATED, UPDATED, UNCHANGED, DELETED = "created", "updated", "unchanged", "deleted"
EXPORTED, PENDING, CONFLICT, INVALID, IGNORED = "exported", "pending", "conflict", "invalid", "ignored"


class CustomObjects(Protocol):
    """The calls the sync makes on the cluster (``KubernetesCluster`` has them)."""

    def list_custom(self, kind: str) -> tuple[list[Manifest], str]: ...

    def apply_custom(self, manifest: Manifest) -> Manifest: ...

    def delete_custom(self, kind: str, name: str, resource_version: str | None = None) -> None: ...


@dataclass(frozen=True)
class SyncResult:
    """What one sync step did. ``action`` is created, updated, deleted or unchanged (in the
    database), exported (to the cluster), pending (a database edit waits for its export),
    conflict (both sides changed: ``database`` and ``cluster`` hold the two versions, neither
    was overwritten), invalid (the cluster's object fails the validator: ``message`` says
    why) or ignored."""

    kind: str
    name: str
    action: str
    message: str = ""
    database: Manifest | None = None
    cluster: Manifest | None = None

    @property
    def conflict(self) -> bool:
        return self.action == CONFLICT

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} {self.action}" + (f": {self.message}" if self.message else "")


# -- cluster to database


def import_event(event: Event) -> SyncResult:
    """Bring one watched change of a NodePool or EC2NodeClass into the database."""
    name = (event.object.get("metadata") or {}).get("name", "")
    if event.kind not in RESOURCE_MODELS:
        return SyncResult(event.kind, name, IGNORED, "not a kind the database keeps")
    if event.type == "DELETED":
        return _import_deletion(event.kind, name)
    if event.type in ("ADDED", "MODIFIED"):
        return _import_object({"kind": event.kind, **event.object})
    return SyncResult(event.kind, name, IGNORED, f"{event.type} events carry no change")


def _import_object(theirs: Manifest, *, base: str | None = None) -> SyncResult:
    """Three-way merge of the cluster's object into the database. ``base`` overrides the
    stored common ancestor (right after an export, it is what was just pushed)."""
    kind, name = theirs["kind"], theirs["metadata"]["name"]
    ours = RESOURCE_MODELS[kind].objects.filter(name=name).first()
    if ours is None:
        return _import_new(theirs)
    base = _synced_digest(ours) if base is None else base
    their_digest, our_digest = digest(theirs), digest(ours.to_manifest())
    if their_digest == our_digest:
        # Same content; the cluster's version and status may have moved, so note them.
        _note_sync(ours, theirs, our_digest, status=theirs.get("status"))
        return SyncResult(kind, name, UNCHANGED)
    if our_digest == base:
        return _store(theirs, ours)  # only the cluster changed
    if their_digest == base:
        _note_sync(ours, theirs, base)  # only the database changed
        return SyncResult(kind, name, PENDING, "the database copy has changes not yet exported to the cluster")
    return _conflict(ours, theirs, "changed in the database and in the cluster since they last agreed")


def _import_new(theirs: Manifest) -> SyncResult:
    """An object the database does not have: new in the cluster, or deleted in the database
    with the deletion not yet exported (then it must not come back)."""
    kind, name = theirs["kind"], theirs["metadata"]["name"]
    deleted = _deletion_awaiting_export(kind, name, theirs)
    if deleted is None:
        return _store(theirs, None)
    if digest(theirs) == deleted.get("syncedDigest"):
        return SyncResult(
            kind, name, PENDING, "deleted in the database; the deletion is not yet exported to the cluster"
        )
    return SyncResult(
        kind,
        name,
        CONFLICT,
        "deleted in the database, but changed in the cluster since they last agreed",
        cluster=theirs,
    )


def _store(theirs: Manifest, ours: CustomResource | None) -> SyncResult:
    """Save the cluster's object through the policy plane (validated, audited), then note
    the sync point."""
    kind, name = theirs["kind"], theirs["metadata"]["name"]
    document = copy.deepcopy(theirs)
    if ours is not None and SYNC in ours.status:
        # Carried over unchanged, so the audit diff shows the cluster's change and nothing else.
        document["status"] = {**(document.get("status") or {}), SYNC: ours.status[SYNC]}
    try:
        applied = policy.apply_manifest(
            document, source=SOURCE, expected_version=ours.resource_version if ours is not None else None
        )
    except policy.Invalid as exc:
        log.warning("not importing %s/%s from the cluster: %s", kind, name, exc)
        return SyncResult(kind, name, INVALID, str(exc), cluster=theirs)
    except policy.Conflict as exc:
        # Someone saved the database copy while this import was under way; theirs stays.
        return _conflict(exc.current, theirs, str(exc))
    assert applied.obj is not None
    _note_sync(applied.obj, theirs, digest(theirs))
    return SyncResult(kind, name, applied.action, "; ".join(applied.warnings))


def _import_deletion(kind: str, name: str) -> SyncResult:
    ours = RESOURCE_MODELS[kind].objects.filter(name=name).first()
    if ours is None:
        return SyncResult(kind, name, UNCHANGED, "not in the database")
    if digest(ours.to_manifest()) != _synced_digest(ours):
        return _conflict(ours, None, "deleted in the cluster, but the database copy has changes not yet exported; kept")
    try:
        warnings = policy.delete_resource(kind, name, source=SOURCE, expected_version=ours.resource_version)
    except policy.Conflict as exc:
        return _conflict(exc.current, None, str(exc))
    except policy.NotFound:
        return SyncResult(kind, name, UNCHANGED, "not in the database")
    return SyncResult(kind, name, DELETED, "; ".join(warnings))


# -- database to cluster


def export_change(kind: str, name: str, cluster: CustomObjects) -> SyncResult:
    """Push the database's copy of one object (or its deletion) to the cluster, based on the
    cluster version last seen. ClusterErrors other than conflicts (the cluster is
    unreachable) propagate, so the calling task can retry."""
    if kind not in RESOURCE_MODELS:
        return SyncResult(kind, name, IGNORED, "not a kind the database keeps")
    ours = RESOURCE_MODELS[kind].objects.filter(name=name).first()
    if ours is None:
        return _export_deletion(kind, name, cluster)
    base, pushed = _synced_digest(ours), digest(ours.to_manifest())
    body = _exportable(ours)
    for _ in range(EXPORT_ATTEMPTS):
        try:
            written = cluster.apply_custom(body)
        except ClusterConflict as exc:
            theirs = exc.current
            if theirs is None:
                # Deleted in the cluster since: that deletion is imported unless ours has edits.
                return _import_deletion(kind, name)
            if base and digest(theirs) == base:
                # Only the version moved (a status write): the edit still applies on top.
                body["metadata"]["resourceVersion"] = _version(theirs)
                continue
            return _import_object(theirs)  # takes theirs only if ours was not edited since
        # What was pushed is the new common ancestor; the API server may have added defaults.
        result = _import_object(written, base=pushed)
        return SyncResult(kind, name, EXPORTED) if result.action == UNCHANGED else result
    return _conflict(ours, None, f"the cluster's object kept changing during {EXPORT_ATTEMPTS} attempts")


def _exportable(ours: CustomResource) -> Manifest:
    """The manifest to create or replace in the cluster: what a person edits, plus the
    cluster version it is based on (no version: create)."""
    body = ours.to_manifest(server_fields=False)
    version = (ours.status.get(SYNC) or {}).get("clusterResourceVersion")
    if version:
        body["metadata"]["resourceVersion"] = version
    return body


def _export_deletion(kind: str, name: str, cluster: CustomObjects) -> SyncResult:
    """Delete in the cluster what was deleted in the database, on condition that the
    cluster's object is still the one the database last saw (its version, read from the
    deleted row as the audit log kept it)."""
    sync = _deletion_awaiting_export(kind, name)
    if sync is None:
        return SyncResult(kind, name, IGNORED, "no deletion in the database waits for export")
    version = sync["clusterResourceVersion"]
    for _ in range(EXPORT_ATTEMPTS):
        try:
            cluster.delete_custom(kind, name, resource_version=version)
            return SyncResult(kind, name, EXPORTED, "deleted in the cluster")
        except ClusterConflict as exc:
            if (
                exc.current is None
                or not _same_object(exc.current, sync)
                or digest(exc.current) != sync["syncedDigest"]
            ):
                return SyncResult(
                    kind,
                    name,
                    CONFLICT,
                    "deleted in the database, but changed in the cluster since they last agreed; not deleted there",
                    database=None,
                    cluster=exc.current,
                )
            version = _version(exc.current)  # only the version moved
    return SyncResult(kind, name, CONFLICT, f"the cluster's object kept changing during {EXPORT_ATTEMPTS} attempts")


# -- both ways


def reconcile(cluster: CustomObjects) -> list[SyncResult]:
    """Settle every object at start-up: import what the cluster has; an object only the
    database has is exported when it never reached the cluster, and removed when it did
    (it was deleted there while nobody watched) unless it has unexported edits."""
    results = []
    for kind in SYNC_ORDER:
        items, _ = cluster.list_custom(kind)
        for item in items:
            result = _import_object({"kind": kind, **item})
            # What waits for export (an edit, a deletion) goes out now.
            results.append(export_change(kind, result.name, cluster) if result.action == PENDING else result)
        listed = [item["metadata"]["name"] for item in items]
        for ours in RESOURCE_MODELS[kind].objects.exclude(name__in=listed):
            if (ours.status.get(SYNC) or {}).get("clusterResourceVersion"):
                results.append(_import_deletion(kind, ours.name))
            else:
                results.append(export_change(kind, ours.name, cluster))
    return results


# -- helpers


def digest(manifest: Manifest) -> str:
    """A digest of what a person edits: labels, annotations and the spec with its defaults.
    Server fields and status are left out, so a controller's status write is no edit."""
    document = crd.default(manifest) if crd.kind_of(manifest) else manifest
    meta = document.get("metadata") or {}
    content = {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}}
    content["spec"] = document.get("spec") or {}
    encoded = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()[:32]


def _deletion_awaiting_export(kind: str, name: str, theirs: Manifest | None = None) -> dict[str, str] | None:
    """The sync point of a row deleted in the database (by a person, not by the sync) whose
    deletion has not reached the cluster: read from the audit log, which kept the row. With
    ``theirs``, only if that is the very object deleted (an object created again with the
    same name is a new one)."""
    last = AuditEntry.objects.filter(kind=kind, name=name).first()
    if last is None or last.action != AuditEntry.Action.DELETED or last.source == SOURCE:
        return None
    sync = ((last.before or {}).get("status") or {}).get(SYNC) or {}
    if not sync.get("clusterResourceVersion") or (theirs is not None and not _same_object(theirs, sync)):
        return None
    return sync


def _same_object(theirs: Manifest, sync: dict[str, str]) -> bool:
    return (theirs.get("metadata") or {}).get("uid") == sync.get("clusterUid")


def _synced_digest(ours: CustomResource) -> str:
    return str((ours.status.get(SYNC) or {}).get("syncedDigest") or "")


def _version(manifest: Manifest) -> str:
    return str((manifest.get("metadata") or {}).get("resourceVersion") or "")


def _note_sync(ours: CustomResource, theirs: Manifest, synced_digest: str, status: Any = None) -> bool:
    """Record the sync point (and, given, the cluster's status) on the row, only if nobody
    wrote the row since it was read. Bookkeeping: no audit entry, no new resourceVersion."""
    current = dict(status) if isinstance(status, dict) else dict(ours.status)
    current[SYNC] = {
        "clusterResourceVersion": _version(theirs),
        "clusterUid": (theirs.get("metadata") or {}).get("uid", ""),
        "syncedDigest": synced_digest,
    }
    if current == ours.status:
        return True
    model = type(ours)
    noted = model.objects.filter(pk=ours.pk, resource_version=ours.resource_version).update(status=current) == 1
    if not noted:
        log.info("%s/%s changed while syncing; its sync point is left as it was", ours.crd_kind.kind, ours.name)
    return noted


def _conflict(ours: CustomResource | None, theirs: Manifest | None, why: str) -> SyncResult:
    kind = ours.crd_kind.kind if ours is not None else (theirs or {}).get("kind", "")
    name = ours.name if ours is not None else ((theirs or {}).get("metadata") or {}).get("name", "")
    log.warning("%s/%s not synced: %s", kind, name, why)
    database = ours.to_manifest() if ours is not None else None
    return SyncResult(kind, name, CONFLICT, why, database=database, cluster=theirs)
