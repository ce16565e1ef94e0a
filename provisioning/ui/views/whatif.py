"""What-if: paste or upload manifests and see the plan, its cost and the pods that cannot be
scheduled, against the policies in force or edited ones, before applying anything."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from provisioning.crd.errors import ManifestError
from provisioning.crd.manifest import load_documents
from provisioning.services import whatif
from provisioning.services.simulate import SimulateError
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.htmx import wants_partial

PASTED = "pasted manifests"


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(VIEWER)
def whatif_page(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"text": "", "result": None, "errors": [], "max_pods": whatif.MAX_PODS}
    if request.method == "POST":
        context["text"] = request.POST.get("manifests", "")
        try:
            documents = _documents(context["text"], request.FILES.get("file"))
            context["result"] = whatif.plan_manifests(documents)
        except ManifestError as exc:
            context["errors"] = [str(exc)]
        except SimulateError as exc:
            context["errors"] = exc.problems
        if wants_partial(request):
            return render(request, "provisioning/whatif.html#whatif-result", context)
    context["policies"] = whatif.policies_in_force()
    return render(request, "provisioning/whatif.html", context)


@require_http_methods(["GET", "HEAD", "POST"])
@role_required(VIEWER)
def disruption_page(request: HttpRequest) -> HttpResponse:
    """What would disruption do now, and why not this node: for the cluster as it is (GET),
    or for a cluster pasted as documents (POST), as ``simulate --disruption`` answers."""
    from datetime import UTC, datetime

    from provisioning.services import disruption
    from provisioning.services.disruptionview import what_if

    context: dict[str, Any] = {"text": "", "result": None, "errors": [], "notes": [], "source": "the cluster now"}
    try:
        if request.method == "POST":
            context["text"] = request.POST.get("manifests", "")
            context["source"] = "the pasted cluster"
            documents = _documents(context["text"], request.FILES.get("file"))
            context["result"], context["notes"] = what_if(
                documents,
                now=datetime.now(UTC),
                spot_to_spot=settings.KARPWEB_SPOT_TO_SPOT_CONSOLIDATION,
            )
        else:
            context["result"] = disruption.what_if()
    except ManifestError as exc:
        context["errors"] = [str(exc)]
    except SimulateError as exc:
        context["errors"] = exc.problems
    if request.method == "POST" and wants_partial(request):
        return render(request, "provisioning/whatif_disruption.html#disruption-result", context)
    return render(request, "provisioning/whatif_disruption.html", context)


def _documents(text: str, upload: UploadedFile | None) -> list[dict[str, Any]]:
    """The documents pasted and uploaded, each source held to the size limit for a manifest."""
    limit = settings.KARPWEB_MAX_MANIFEST_BYTES
    if not text.strip() and upload is None:
        raise ManifestError("paste manifests or choose a file, then plan")
    documents = load_documents(text, source=PASTED, max_bytes=limit) if text.strip() else []
    if upload is not None:
        # Read one byte past the limit: enough to refuse a big file without holding all of it.
        documents += load_documents(upload.read(limit + 1), source=upload.name or "upload", max_bytes=limit)
    if not documents:
        raise ManifestError("no document found: YAML documents separated by ---, or JSON")
    return documents
