"""Policies: NodePools and EC2NodeClasses."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from provisioning.crd.manifest import dump_yaml
from provisioning.models import RESOURCE_MODELS, AuditEntry
from provisioning.services.policy import validate_manifest
from provisioning.ui.access import VIEWER, role_required


@role_required(VIEWER)
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
