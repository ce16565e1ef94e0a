"""Pending pods: what waits for capacity, what it asks for, and why it cannot be placed."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from provisioning.models import NodePool
from provisioning.services import inventory
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.describe import describe_pod
from provisioning.ui.htmx import wants_partial
from provisioning.ui.pages import paginate, query_without_page

# htmx stops polling an element when its response has this status: an idle list goes quiet.
STOP_POLLING = 286


@require_safe
@role_required(VIEWER)
def pending(request: HttpRequest) -> HttpResponse:
    namespace = request.GET.get("namespace", "")
    nodepool = request.GET.get("nodepool", "")
    page = paginate(request, inventory.pending_pods(namespace, nodepool))
    rows = [(pod, describe_pod(pod.manifest)) for pod in page]
    context = {
        "page": page,
        "rows": rows,
        "namespace": namespace,
        "nodepool": nodepool,
        "namespaces": inventory.pending_namespaces(),
        "nodepools": NodePool.objects.order_by("name").values_list("name", flat=True),
        "query": query_without_page(request),
        "live": page.paginator.count > 0,
    }
    if wants_partial(request):
        response = render(request, "provisioning/pods/pending.html#pending-list", context)
        if not context["live"]:
            response.status_code = STOP_POLLING
        return response
    return render(request, "provisioning/pods/pending.html", context)
