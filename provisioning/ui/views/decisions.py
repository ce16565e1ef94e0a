"""Decisions: every provisioning batch, and for each claim why its instance type won."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_safe

from provisioning.models import Decision
from provisioning.services import inventory
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.pages import paginate

PAGE_SIZE = 50


@require_safe
@role_required(VIEWER)
def decision_list(request: HttpRequest) -> HttpResponse:
    page = paginate(request, inventory.decisions(), PAGE_SIZE)
    counts = inventory.claim_counts(d.pk for d in page)
    rows = [(d, counts.get(d.pk, 0)) for d in page]
    return render(request, "provisioning/decisions/list.html", {"page": page, "rows": rows})


@require_safe
@role_required(VIEWER)
def decision_detail(request: HttpRequest, pk: int) -> HttpResponse:
    decision = get_object_or_404(Decision, pk=pk)
    context = {
        "decision": decision,
        "claims": inventory.explain(decision),
        "duration": sum(v for v in (decision.timings or {}).values() if isinstance(v, int | float)),
    }
    return render(request, "provisioning/decisions/detail.html", context)
