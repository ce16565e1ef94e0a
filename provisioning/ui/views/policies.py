"""Policies: the list of NodePools, EC2NodeClasses and NodeOverlays, one policy with its
history, and deleting one. Changing them is in ``policy_edit``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS, AuditEntry, ClusterNode, EC2NodeClass, NodeOverlay, NodePool
from provisioning.services import overlays, reservations
from provisioning.services.policy import (
    Conflict,
    Invalid,
    NotFound,
    apply_manifest,
    delete_resource,
    deletion_warnings,
    validate_manifest,
)
from provisioning.ui import starters
from provisioning.ui.access import EDITOR, VIEWER, role_required
from provisioning.ui.forms import DeleteForm, ReplicasForm
from provisioning.ui.htmx import wants_partial


@dataclass
class NodePoolRow:
    pool: NodePool
    nodeclass: EC2NodeClass | None
    nodes: int

    @property
    def replicas(self) -> int | None:
        """``spec.replicas`` of a static NodePool; None for a dynamic one."""
        return self.pool.spec.get("replicas")

    @property
    def limits(self) -> str:
        return ", ".join(f"{key} {value}" for key, value in (self.pool.spec.get("limits") or {}).items())

    @property
    def readiness(self) -> tuple[bool | None, str]:
        """Ready as upstream decides it: its own Ready condition when the cluster reported
        one, else whether its EC2NodeClass exists and is Ready. None: not known yet."""
        own = _ready_condition(self.pool.status)
        if own is not None:
            return own.get("status") == "True", own.get("message", "")
        if self.nodeclass is None:
            return False, f"EC2NodeClass {self.pool.node_class_name!r} not found"
        ready = self.nodeclass.ready_condition
        if ready is None:
            return None, "EC2NodeClass not resolved yet"
        if ready.get("status") != "True":
            return False, f"EC2NodeClass not ready: {ready.get('message', '')}"
        return True, ""


def _ready_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition
    return None


@require_safe
@role_required(VIEWER)
def policy_list(request: HttpRequest) -> HttpResponse:
    nodeclasses = list(EC2NodeClass.objects.all())
    by_name = {nc.name: nc for nc in nodeclasses}
    # One aggregate for every NodePool, so the page costs the same with 3 pools or 300.
    nodes = dict(
        ClusterNode.objects.exclude(nodepool="")
        .order_by()
        .values("nodepool")
        .annotate(n=Count("id"))
        .values_list("nodepool", "n")
    )
    rows = [
        NodePoolRow(pool, by_name.get(pool.node_class_name), nodes.get(pool.name, 0)) for pool in NodePool.objects.all()
    ]
    context = {
        "nodepool_rows": rows,
        "nodeclasses": nodeclasses,
        "overlays": list(NodeOverlay.objects.all()),
        "starters": {kind: starters.starters_for(kind) for kind in RESOURCE_MODELS},
    }
    return render(request, "provisioning/policies/list.html", context)


@require_safe
@role_required(VIEWER)
def policy_detail(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    """One policy as YAML with its history; a deleted one still shows its history, so it
    can be restored."""
    model = RESOURCE_MODELS.get(kind)
    if model is None:
        raise Http404("unknown kind")
    obj = model.objects.filter(name=name).first()
    history = list(AuditEntry.objects.filter(kind=kind, name=name).defer("before", "after")[:50])
    if obj is None and not history:
        raise Http404(f"{kind} {name} not found")
    context = {"obj": obj, "kind": kind, "name": name, "history": history, "warnings": []}
    if obj is not None:
        context["yaml"] = dump_yaml([obj.to_manifest()])
        context["warnings"] = validate_manifest(obj.to_manifest(server_fields=False)).warnings
    if isinstance(obj, EC2NodeClass):
        context["reservations"] = reservations.nodeclass_reservations(obj)
    if isinstance(obj, NodeOverlay):
        # What it does now, as the next plan will apply it (the status is at most a minute old).
        context["verdict"] = overlays.evaluate().get(obj.name)
    if isinstance(obj, NodePool) and obj.spec.get("replicas") is not None:
        context.update(_replicas_context(obj))
    return render(request, "provisioning/policies/detail.html", context)


def _replicas_context(pool: NodePool, form: ReplicasForm | None = None, **extra: Any) -> dict[str, Any]:
    """The Replicas card of a static NodePool: wanted, what it has (status.nodes), the form."""
    initial = {"replicas": pool.spec.get("replicas"), "expected_version": pool.resource_version}
    return {
        "pool": pool,
        "replicas": pool.spec.get("replicas"),
        "current": (pool.status or {}).get("nodes", 0),
        "replicas_form": form or ReplicasForm(initial=initial),
        **extra,
    }


@require_http_methods(["POST"])
@role_required(EDITOR)
def policy_scale(request: HttpRequest, name: str) -> HttpResponse:
    """Set a static NodePool's replicas (its scale, as ``kubectl scale``) through the validator;
    with htmx, answer with the Replicas card only."""
    pool = get_object_or_404(NodePool, name=name)
    if pool.spec.get("replicas") is None:
        raise Http404(f"NodePool {name} is not static (no spec.replicas)")
    form = ReplicasForm(request.POST)
    error = ""
    if form.is_valid():
        document = pool.to_manifest()
        document.pop("status", None)
        document["spec"] = {**document["spec"], "replicas": form.cleaned_data["replicas"]}
        try:
            apply_manifest(
                document,
                source=AuditEntry.Source.UI,
                actor=request.user.get_username(),
                expected_version=form.cleaned_data["expected_version"],
            )
        except Invalid as exc:
            error = "; ".join(str(e) for e in exc.result.errors)
        except Conflict as exc:
            error = f"{exc}: the page shows the current version now; scale it again if you still want to"
        else:
            pool = NodePool.objects.get(name=name)
            done = f"NodePool {name} scaled to {pool.spec['replicas']} replicas."
            if not wants_partial(request):
                messages.success(request, done)
                return redirect("provisioning:policy-detail", "NodePool", name)
            return render(request, "provisioning/policies/_replicas.html", _replicas_context(pool, scaled=done))
    else:
        error = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
    if error and not wants_partial(request):
        messages.error(request, error)
        return redirect("provisioning:policy-detail", "NodePool", name)
    pool = NodePool.objects.get(name=name)
    return render(request, "provisioning/policies/_replicas.html", _replicas_context(pool, scale_error=error))


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(EDITOR)
def policy_delete(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    model = RESOURCE_MODELS.get(kind)
    if model is None:
        raise Http404("unknown kind")
    obj = get_object_or_404(model, name=name)
    form = DeleteForm(request.POST or None, initial={"expected_version": obj.resource_version})
    context = {
        "obj": obj,
        "kind": kind,
        "form": form,
        "yaml": dump_yaml([obj.to_manifest()]),
        "warnings": deletion_warnings(kind, name),
    }
    if request.method != "POST" or not form.is_valid():
        return render(request, "provisioning/policies/delete.html", context)
    try:
        delete_resource(
            kind,
            name,
            source=AuditEntry.Source.UI,
            actor=request.user.get_username(),
            expected_version=form.cleaned_data["expected_version"],
        )
    except Conflict as exc:
        # Show the new version: deleting it is a new decision, made on what is there now.
        context.update(conflict=str(exc), form=DeleteForm(initial={"expected_version": obj.resource_version}))
        return render(request, "provisioning/policies/delete.html", context)  # 200: see policy_edit
    except NotFound:
        messages.info(request, f"{kind} {name} was already deleted.")
        return redirect("provisioning:policy-list")
    messages.success(request, f"{kind} {name} deleted.")
    return redirect("provisioning:policy-list")
