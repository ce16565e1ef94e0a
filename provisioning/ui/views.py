"""Dashboard pages. Each view reads through the same querysets and services as the API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS, AuditEntry, EC2NodeClass, NodePool
from provisioning.services import clusterview
from provisioning.services.policy import validate_manifest


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    nodepools = list(NodePool.objects.all())
    nodeclasses = list(EC2NodeClass.objects.all())
    known = {nc.name for nc in nodeclasses}
    rows = [{"pool": pool, "nodeclass_ok": pool.node_class_name in known} for pool in nodepools]
    context = {
        "nodepool_rows": rows,
        "nodeclasses": nodeclasses,
        "recent_changes": AuditEntry.objects.all()[:10],
        "cluster": clusterview.summary(),
    }
    if request.htmx:  # the live part polls itself
        return render(request, "provisioning/overview.html#cluster-now", context)
    return render(request, "provisioning/overview.html", context)


@login_required
def policy_detail(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    model = RESOURCE_MODELS.get(kind)
    if model is None:
        raise Http404("unknown kind")
    obj = model.objects.filter(name=name).first()
    if obj is None:
        raise Http404(f"{kind} {name} not found")
    manifest = obj.to_manifest()
    result = validate_manifest(obj.to_manifest(server_fields=False))
    context = {
        "obj": obj,
        "kind": kind,
        "yaml": dump_yaml([manifest]),
        "warnings": result.warnings,
        "history": AuditEntry.objects.filter(kind=kind, name=name)[:50],
    }
    return render(request, "provisioning/policy_detail.html", context)
