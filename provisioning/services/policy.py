"""The policy plane: validate, apply and delete NodePools, EC2NodeClasses and NodeOverlays.

Every write, from the UI, REST, ``manage.py import`` or the cluster sync, goes through
``apply_manifest`` / ``delete_resource``: one validator, one audit trail, and optimistic
concurrency on ``resourceVersion`` so no writer silently overwrites another.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from provisioning import crd
from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS, AuditEntry, CustomResource, EC2NodeClass, NodeOverlay, NodePool
from provisioning.services import catalog
from provisioning.services.dispatch import dispatcher

log = logging.getLogger(__name__)


class PolicyError(Exception):
    """Base for errors a caller shows to a person."""


class Invalid(PolicyError):
    def __init__(self, result: crd.ValidationResult) -> None:
        self.result = result
        super().__init__(result.summary())


class Conflict(PolicyError):
    """The object changed since the caller read it; ``current`` is what it is now."""

    def __init__(self, current: CustomResource | None, message: str) -> None:
        self.current = current
        super().__init__(message)


class AlreadyExists(Conflict):
    """A create for a name that is taken."""


class NotFound(PolicyError):
    pass


@dataclass
class Applied:
    obj: CustomResource | None
    action: str  # created | updated | unchanged
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def manifest(self) -> dict[str, Any] | None:
        return self.obj.to_manifest() if self.obj is not None else None


def nodeclass_exists(name: str) -> bool:
    return EC2NodeClass.objects.filter(name=name).exists()


def nodepools_referencing(nodeclass_name: str) -> list[str]:
    return list(NodePool.objects.filter(node_class_name=nodeclass_name).values_list("name", flat=True))


def validate_manifest(document: Any, old: dict[str, Any] | None = None) -> crd.ValidationResult:
    """THE validator with the database (known EC2NodeClasses) and the catalog (which label
    values instance types have) as context."""
    labels = catalog.catalog_labels() if crd.kind_of(document) in (crd.NODEPOOL, crd.NODEOVERLAY) else None
    return crd.validate(document, old, nodeclass_exists=nodeclass_exists, catalog_labels=labels)


def deletion_warnings(kind: str, name: str) -> list[str]:
    if kind != "EC2NodeClass":
        return []
    users = nodepools_referencing(name)
    if not users:
        return []
    shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
    return [f"EC2NodeClass {name!r} is still used by NodePool {shown}; they stop launching nodes"]


def apply_manifest(
    document: Any,
    *,
    source: str,
    actor: str = "",
    expected_version: str | int | None = None,
    dry_run: bool = False,
    create_only: bool = False,
) -> Applied:
    """Create or update one resource from its manifest (server-side apply semantics:
    the manifest's metadata labels, annotations and spec replace the stored ones).

    ``create_only`` makes it a create, as a POST to the API server: an object of that name
    already there is a Conflict, never replaced."""
    kind = crd.kind_of(document)
    current = None
    if kind is not None:
        name = (document.get("metadata") or {}).get("name") if isinstance(document.get("metadata"), dict) else None
        if isinstance(name, str):
            current = RESOURCE_MODELS[kind.kind].objects.filter(name=name).first()
    old = current.to_manifest() if current is not None else None
    result = validate_manifest(document, old)
    if not result.ok:
        raise Invalid(result)
    assert kind is not None
    defaulted = crd.default(document)
    if create_only and current is not None:
        raise AlreadyExists(current, f"{kind.kind} {current.name!r} already exists; edit it, or choose another name")
    if dry_run:
        preview = _build(kind.kind, defaulted, current)
        return Applied(preview, "created" if current is None else "updated", result.warnings, dry_run=True)
    try:
        with transaction.atomic():
            applied = _save(kind.kind, defaulted, source, actor, expected_version, result.warnings, create_only)
            _export_later(kind.kind, applied.obj.name, source)
    except IntegrityError:
        # Two creates of one name raced; the loser is told, as the API server would.
        name = defaulted["metadata"]["name"]
        raise AlreadyExists(None, f"{kind.kind} {name!r} was created concurrently") from None
    if applied.action != "unchanged":
        _judge_overlays(kind.kind)
        if isinstance(applied.obj, NodeOverlay):
            applied.obj.refresh_from_db(fields=["status"])
    return applied


def _save(
    kind: str,
    document: dict[str, Any],
    source: str,
    actor: str,
    expected_version: str | int | None,
    warnings: list[str],
    create_only: bool = False,
) -> Applied:
    model = RESOURCE_MODELS[kind]
    name = document["metadata"]["name"]
    current = model.objects.select_for_update().filter(name=name).first()
    if create_only and current is not None:
        raise AlreadyExists(current, f"{kind} {name!r} already exists; edit it, or choose another name")
    if expected_version not in (None, "") and (
        current is None or str(current.resource_version) != str(expected_version)
    ):
        raise Conflict(
            current,
            f"{kind} {name!r} has been modified (resourceVersion {current.resource_version if current else 'none'}"
            f", you sent {expected_version}); read it again and reapply your change",
        )
    before = current.to_manifest() if current is not None else None
    obj = _build(kind, document, current)
    if current is None:
        obj.save()
        action = AuditEntry.Action.CREATED
    else:
        if obj.to_manifest() == before:
            return Applied(current, "unchanged", warnings)
        spec_changed = before.get("spec") != obj.spec
        # Conditional update: succeed only if nobody bumped the version meanwhile.
        updated = model.objects.filter(pk=current.pk, resource_version=current.resource_version).update(
            labels=obj.labels,
            annotations=obj.annotations,
            spec=obj.spec,
            status=obj.status,
            resource_version=current.resource_version + 1,
            generation=current.generation + (1 if spec_changed else 0),
            **_indexed(obj),
        )
        if updated != 1:
            raise Conflict(model.objects.filter(pk=current.pk).first(), f"{kind} {name!r} changed concurrently")
        obj = model.objects.get(pk=current.pk)
        action = AuditEntry.Action.UPDATED
    record(obj, action, source, actor, before, obj.to_manifest())
    return Applied(obj, action.value, warnings)


def _build(kind: str, document: dict[str, Any], current: CustomResource | None) -> CustomResource:
    model = RESOURCE_MODELS[kind]
    meta = document["metadata"]
    obj = model(
        name=meta["name"],
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        spec=document.get("spec") or {},
        status=document.get("status") if document.get("status") is not None else (current.status if current else {}),
    )
    if current is not None:
        obj.pk, obj.uid, obj.created_at = current.pk, current.uid, current.created_at
        obj.resource_version, obj.generation = current.resource_version, current.generation
    elif isinstance(meta.get("uid"), str):
        # Keep the cluster's identity on import; a uid that is no UUID gets our own.
        with contextlib.suppress(ValueError):
            obj.uid = uuid.UUID(meta["uid"])
    obj.index_spec()
    return obj


def _indexed(obj: CustomResource) -> dict[str, Any]:
    if isinstance(obj, NodePool):
        return {"node_class_name": obj.node_class_name, "weight": obj.weight}
    if isinstance(obj, NodeOverlay):
        return {"weight": obj.weight}
    return {}


def delete_resource(
    kind: str, name: str, *, source: str, actor: str = "", expected_version: str | int | None = None
) -> list[str]:
    """Delete one resource; returns warnings (an EC2NodeClass still in use)."""
    model = RESOURCE_MODELS.get(kind)
    if model is None:
        raise NotFound(f"unknown kind {kind!r}")
    warnings = deletion_warnings(kind, name)
    with transaction.atomic():
        current = model.objects.select_for_update().filter(name=name).first()
        if current is None:
            raise NotFound(f"{kind} {name!r} not found")
        if expected_version not in (None, "") and str(current.resource_version) != str(expected_version):
            raise Conflict(current, f"{kind} {name!r} has been modified; read it again before deleting")
        before = current.to_manifest()
        current.delete()
        record(current, AuditEntry.Action.DELETED, source, actor, before, None)
        _export_later(kind, name, source)
    _judge_overlays(kind)
    return warnings


def _judge_overlays(kind: str) -> None:
    """After a policy changed, the NodeOverlays' status says again which apply (a new overlay
    may conflict with one of equal weight; a NodePool's labels decide what they reach). The
    minutely refresh catches what else changes; a failure here never fails the write."""
    if kind not in RESOURCE_MODELS or not NodeOverlay.objects.exists():
        return
    from provisioning.services import overlays

    try:
        with transaction.atomic():  # a savepoint: a failure here leaves an outer transaction usable
            overlays.refresh_status()
    except Exception:  # noqa: BLE001 - the write is done; the next refresh tries again
        log.exception("NodeOverlay status after a change of a %s", kind)


def _export_later(kind: str, name: str, source: str) -> None:
    """With a real cluster, a change made here (not one that came from kubectl) is pushed to
    the cluster once committed; the export checks resourceVersions, so nothing is lost."""
    if settings.KARPWEB_CLUSTER != "kubernetes" or source == AuditEntry.Source.KUBECTL:
        return
    transaction.on_commit(lambda: dispatcher().export_policy(kind, name))


def record(
    obj: CustomResource,
    action: str,
    source: str,
    actor: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        kind=obj.crd_kind.kind,
        name=obj.name,
        uid=obj.uid,
        action=action,
        source=source,
        actor=actor,
        before=before,
        after=after,
        diff=manifest_diff(before, after, obj.name),
    )


def manifest_diff(before: dict[str, Any] | None, after: dict[str, Any] | None, name: str) -> str:
    """A unified diff of the two manifests as YAML, server-set counters left out."""
    old = dump_yaml([_comparable(before)]).splitlines(keepends=True) if before else []
    new = dump_yaml([_comparable(after)]).splitlines(keepends=True) if after else []
    return "".join(difflib.unified_diff(old, new, f"{name} (before)", f"{name} (after)"))


def _comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in manifest["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**manifest, "metadata": meta}
