"""The overview: the cluster now, policies and their recent changes."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from provisioning.models import AuditEntry, EC2NodeClass, NodePool
from provisioning.services import clusterview
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.htmx import wants_partial


@require_safe
@role_required(VIEWER)
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
    if wants_partial(request):  # the live part polls itself
        return render(request, "provisioning/overview.html#cluster-now", context)
    return render(request, "provisioning/overview.html", context)
