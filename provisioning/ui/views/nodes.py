"""Nodes: each NodeClaim and its Node, how full it is, and why it is or is not a
consolidation candidate; and the log of disruptions."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from provisioning.cluster.simulated import budget_manifests
from provisioning.models import ClusterNode, NodeClaim, NodePool
from provisioning.services import inventory
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.describe import describe_pod
from provisioning.ui.htmx import wants_partial
from provisioning.ui.pages import paginate, query_without_page


@require_safe
@role_required(VIEWER)
def node_list(request: HttpRequest) -> HttpResponse:
    nodepool = request.GET.get("nodepool", "")
    capacity_type = request.GET.get("capacity_type", "")
    state = request.GET.get("state", "")
    if state and state not in NodeClaim.State.values:
        state = ""  # an unknown state filters nothing rather than failing
    page = paginate(request, inventory.nodeclaims(nodepool, capacity_type, state))
    context = {
        "page": page,
        "rows": inventory.node_rows(list(page)),
        "nodepool": nodepool,
        "capacity_type": capacity_type,
        "state": state,
        "nodepools": NodePool.objects.order_by("name").values_list("name", flat=True),
        "states": NodeClaim.State.choices,
        "query": query_without_page(request),
        "disruptions": inventory.disruptions()[:20],
    }
    if wants_partial(request):
        return render(request, "provisioning/nodes/list.html#node-table", context)
    return render(request, "provisioning/nodes/list.html", context)


@require_safe
@role_required(VIEWER)
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    claim = NodeClaim.objects.filter(name=name).first() or NodeClaim.objects.filter(node_name=name).first()
    if claim is None:
        raise Http404(f"no NodeClaim or node {name}")
    (row,) = inventory.node_rows([claim])
    pods = list(inventory.pods_on(claim.node_name)) if claim.node_name else []
    context = {
        "row": row,
        "claim": claim,
        "pods": [(pod, describe_pod(pod.manifest)) for pod in pods],
        "node": ClusterNode.objects.filter(name=claim.node_name).first() if claim.node_name else None,
        "disruptions": inventory.disruptions_of(claim.name)[:20],
    }
    return render(request, "provisioning/nodes/detail.html", context)


@require_safe
@role_required(VIEWER)
def disruption_list(request: HttpRequest) -> HttpResponse:
    page = paginate(request, inventory.disruptions(), 50)
    # The simulated cluster's PodDisruptionBudgets, which drains wait for (a real cluster's
    # are not listed here: that would ask its API on every view).
    budgets = budget_manifests() if settings.KARPWEB_CLUSTER == "simulated" else []
    return render(request, "provisioning/nodes/disruptions.html", {"page": page, "budgets": budgets})


@require_safe
@role_required(VIEWER)
def interruption_list(request: HttpRequest) -> HttpResponse:
    page = paginate(request, inventory.interruptions(), 50)
    rows = inventory.with_recovery(page.object_list)
    context = {"page": page, "rows": rows, "queue": settings.KARPWEB_INTERRUPTION_QUEUE}
    return render(request, "provisioning/nodes/interruptions.html", context)
